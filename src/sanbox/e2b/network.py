"""E2B's network settings on a computer's egress allowlist (docs/e2b.md). Sanbox lets a computer
reach only what its allowlist names, so:
- `allowOut` is the allowlist (host names, `*.` wildcards, `cidr:port` rules): E2B's address
  ranges (`8.8.8.0/24`, `0.0.0.0/0`) and single addresses (`8.8.8.8`, every port of it in E2B)
  need a port here and are refused without one, saying so (an address is never taken for a
  host name);
- neither `allowOut` nor `allow_internet_access: false` at a create: the template's allowlist
  (`base`'s is empty), where E2B lets everything out;
- `allow_internet_access: false` is an empty allowlist;
- `denyOut` adds nothing: E2B's allowed entries win over its denied ones, and whatever the
  allowlist does not name is denied already;
- neither given: the template's allowlist, as at a create without them (E2B's update clears what
  it leaves out);
- transform `rules`, an `egressProxy`, `dnsServers`, `maskRequestHost` and `httpsPorts` are not
  offered: refused at a create and at an update, never dropped without a word (Sanbox's secrets
  inject credentials: docs/secrets.md)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..control.errors import InvalidRequestError


class NetworkBody(BaseModel):
    """`network` of a create."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    allow_out: list[str] | None = Field(None, alias="allowOut", max_length=256)
    deny_out: list[str] | None = Field(None, alias="denyOut", max_length=256)
    allow_public_traffic: bool | None = Field(None, alias="allowPublicTraffic")
    rules: dict[str, Any] | None = None
    egress_proxy: dict[str, Any] | None = Field(None, alias="egressProxy")
    dns_servers: list[str] | None = Field(None, alias="dnsServers", max_length=16)
    mask_request_host: str | None = Field(None, alias="maskRequestHost", max_length=253)
    https_ports: list[int] | None = Field(None, alias="httpsPorts", max_length=64)

    def check_offered(self) -> None:
        """Refuse what Sanbox does not offer rather than run without it."""
        asked = {
            "rules": self.rules,
            "egressProxy": self.egress_proxy,
            "dnsServers": self.dns_servers,
            "maskRequestHost": self.mask_request_host,
            "httpsPorts": self.https_ports,
        }
        for name, given in asked.items():
            if given:
                raise InvalidRequestError(
                    f"network.{name} is not offered by Sanbox: leave it out (docs/e2b.md)",
                    "not_offered",
                )
        for entry in self.allow_out or ():
            refusal = _address_refusal(entry)
            if refusal is not None:
                raise InvalidRequestError(refusal, "invalid_rule")


def _address_refusal(entry: str) -> str | None:
    """Why an `allowOut` entry E2B reads as addresses, every port of them (an address range
    without a port, `8.8.8.0/24`, `0.0.0.0/0`, `2001:db8::/32`, or one address, `8.8.8.8`,
    `2001:db8::1`), is refused; None for a host name, a wildcard or a `cidr:port` rule. Sanbox's
    allowlist reads a bare IPv4 address as a host name (an HTTP `Host` of it, port 80 only):
    never that here, where E2B means the whole address."""
    text = entry.strip()
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None
    shown = repr(entry[:80])
    if "/" not in text and network.num_addresses == 1:
        return (
            f"network.allowOut: {shown} is an IP address, which E2B opens on every port; "
            "Sanbox's allowlist takes host names (api.github.com), wildcards (*.pypi.org) and "
            "IPv4 addresses or ranges with one port (8.8.8.8/32:53, 203.0.113.0/24:443): give "
            "the port the sandbox needs, or its host name (docs/e2b.md)"
        )
    return (
        f"network.allowOut: {shown} is an address range, and Sanbox's allowlist takes host "
        "names (api.github.com), wildcards (*.pypi.org) and IPv4 address ranges with one port "
        "(203.0.113.0/24:443); nothing else goes out, and all outbound traffic (E2B's default) "
        "is not offered: list the hosts the sandbox needs (docs/e2b.md)"
    )


class NetworkUpdate(NetworkBody):
    """The body of `PUT /sandboxes/{id}/network` (the SDK's `update_network`)."""

    allow_internet_access: bool | None = None


def updated_allow(update: NetworkUpdate, default: Callable[[], list[str]]) -> list[str]:
    """The allowlist an update sets (`default`: the computer's template's, asked for only when
    the update names nothing)."""
    update.check_offered()
    if update.allow_internet_access is False:
        return []
    if update.allow_out is not None:
        return list(update.allow_out)
    return default()

"""Published-port host names: ``PORT-NAME.ORG.<domain>`` (or ``PORT-NAME.<domain>`` for the
default org), parsed whole; anything else is not a published port."""

from __future__ import annotations

import re
from dataclasses import dataclass

_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_PORT_LABEL = re.compile(r"([1-9][0-9]{0,4})-(" + _DNS_LABEL.pattern + ")")


@dataclass(frozen=True)
class PortHost:
    """What a published-port host name names: ``port`` of computer ``name`` in ``org`` (None for
    the short form ``PORT-NAME.<domain>``, which means the default org only)."""

    port: int
    name: str
    org: str | None = None


def parse_port_host(host: str, base_domain: str = "localhost") -> PortHost | None:
    """``8080-demo.acme.localhost[:7070]`` -> ``PortHost(8080, "demo", "acme")``;
    ``8080-demo.localhost`` -> ``PortHost(8080, "demo")``; None when the host is not one."""
    host = host.strip().lower()
    head, colon, server_port = host.rpartition(":")
    if colon and not (server_port.isascii() and server_port.isdigit()):
        return None
    host = head if colon else host
    suffix = "." + base_domain.strip(".").lower()
    host = host.rstrip(".")
    if not host.endswith(suffix):
        return None
    labels = host[: -len(suffix)].split(".")
    if len(labels) > 2 or (len(labels) == 2 and _DNS_LABEL.fullmatch(labels[1]) is None):
        return None
    match = _PORT_LABEL.fullmatch(labels[0])
    if match is None or len(match[0]) > 63 or int(match[1]) > 65535:
        return None
    return PortHost(int(match[1]), match[2], labels[1] if len(labels) == 2 else None)

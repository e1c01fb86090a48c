"""A computer's egress policy: the host names (and wildcards) it may reach through the egress
proxy, plus optional direct `cidr:port` rules. Pure data and matching; empty means nothing goes
out. The addresses a name resolves to are checked separately against `BLOCKED_NETWORKS`."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"^(\*\.)?({_LABEL}\.)*{_LABEL}$")

# never reachable through the proxy, whatever a name resolves to: private, shared (CGNAT),
# loopback, link-local (cloud metadata lives at 169.254.169.254), unspecified, multicast, reserved
BLOCKED_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4",
        "240.0.0.0/4", "255.255.255.255/32",
    )
)  # fmt: skip


class PolicyError(ValueError):
    """An allow rule that is not a host name, a wildcard or a cidr:port."""


def blocked_address(ip: str) -> str | None:
    """Why `ip` may not be dialled (None if it may)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return "not an IP address"
    if addr.version == 6:
        return "IPv6 is off"
    for net in BLOCKED_NETWORKS:
        if addr in net:
            if str(addr) == "169.254.169.254":
                return "the metadata address"
            return f"a private or reserved address ({net})"
    return None


@dataclass(frozen=True)
class CidrRule:
    network: ipaddress.IPv4Network
    port: int

    def __str__(self) -> str:
        return f"{self.network}:{self.port}"

    def matches(self, ip: str, port: int) -> bool:
        try:
            return port == self.port and ipaddress.ip_address(ip) in self.network
        except ValueError:
            return False


def parse_rule(rule: str) -> str | CidrRule:
    """A host name (`api.github.com`), a wildcard (`*.pypi.org`) or a `cidr:port` rule."""
    text = rule.strip().lower().rstrip(".")
    if re.match(r"^[0-9./]+:[0-9]+$", text):
        cidr, _, port_text = text.rpartition(":")
        try:
            network = ipaddress.IPv4Network(cidr, strict=False)
        except ValueError as exc:
            raise PolicyError(f"{rule!r}: {exc}") from None
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise PolicyError(f"{rule!r}: port must be 1-65535")
        return CidrRule(network, port)
    if not _HOST.match(text) or len(text) > 253:
        raise PolicyError(
            f"{rule!r} is not a host name (api.github.com), a wildcard (*.pypi.org) "
            "or a cidr:port rule (203.0.113.0/24:5432)"
        )
    return text


@dataclass(frozen=True)
class Policy:
    hosts: frozenset[str] = field(default_factory=frozenset)
    wildcards: frozenset[str] = field(default_factory=frozenset)  # suffixes, without "*."
    cidrs: tuple[CidrRule, ...] = ()

    @classmethod
    def of(cls, rules: list[str] | tuple[str, ...]) -> Policy:
        hosts, wildcards, cidrs = set(), set(), []
        for rule in rules:
            parsed = parse_rule(rule)
            if isinstance(parsed, CidrRule):
                cidrs.append(parsed)
            elif parsed.startswith("*."):
                wildcards.add(parsed[2:])
            else:
                hosts.add(parsed)
        return cls(frozenset(hosts), frozenset(wildcards), tuple(cidrs))

    def rules(self) -> list[str]:
        return (
            sorted(self.hosts)
            + sorted(f"*.{w}" for w in self.wildcards)
            + [str(c) for c in self.cidrs]
        )

    def allows_host(self, name: str) -> bool:
        """`*.pypi.org` allows `files.pypi.org` (any depth), not `pypi.org` itself."""
        name = name.lower().rstrip(".")
        if name in self.hosts:
            return True
        return any(name.endswith("." + suffix) for suffix in self.wildcards)

    def allows_direct(self, ip: str, port: int) -> bool:
        return any(rule.matches(ip, port) for rule in self.cidrs)

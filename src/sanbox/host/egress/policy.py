"""A computer's egress policy: the host names (and wildcards) it may reach through the egress
proxy, plus optional direct `cidr:port` rules. Pure data and matching; empty means nothing goes
out. Where computers may never go (this host, private ranges, metadata) is `reach.py`'s
business: it checks `cidr:port` rules when they are set and every address before it is dialled."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"^(\*\.)?({_LABEL}\.)*{_LABEL}$")


class PolicyError(ValueError):
    """An allow rule that is not a host name, a wildcard or a cidr:port, or (`reach.py`) a
    cidr:port rule that reaches where computers may not go."""


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

"""The client's address behind proxies: `X-Forwarded-For` is believed only from a direct peer
the operator trusts (`SANBOX_TRUSTED_PROXIES`, CIDRs; none by default, so by default the header
is ignored and the peer's address is the client's). Anyone can write the header; only what a
trusted proxy appended says where a request came from. The failure limiter, the audit, the
MCP endpoint's inner requests and the published-port relay (what it tells a guest) all take the
address from here."""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import IPv4Network, IPv6Network, ip_address

from starlette.types import Scope

Network = IPv4Network | IPv6Network
UNKNOWN = "unknown"


def scope_client(scope: Scope) -> str:
    """The client's address of an ASGI connection."""
    client = scope.get("client")
    peer = str(client[0]) if client else UNKNOWN
    app = scope.get("app")
    settings = getattr(app.state, "settings", None) if app is not None else None
    proxies: Sequence[Network] = settings.proxies if settings is not None else ()
    if not proxies:
        return peer
    headers = scope.get("headers") or []
    forwarded = [v.decode("latin-1") for k, v in headers if k.lower() == b"x-forwarded-for"]
    return forwarded_for(peer, forwarded, proxies)


def forwarded_proto(scope: Scope) -> str:
    """`http` or `https` as the client spoke it: the connection's scheme, or a trusted proxy's
    `X-Forwarded-Proto` (the last one it set)."""
    scheme = str(scope.get("scheme") or "http")
    scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    client = scope.get("client")
    app = scope.get("app")
    settings = getattr(app.state, "settings", None) if app is not None else None
    proxies: Sequence[Network] = settings.proxies if settings is not None else ()
    if client and proxies and _trusted(str(client[0]), proxies):
        for name, value in reversed(scope.get("headers") or []):
            if name.lower() == b"x-forwarded-proto":
                proto = str(value.decode("latin-1")).split(",")[-1].strip().lower()
                if proto in ("http", "https"):
                    return proto
                break
    return scheme


def forwarded_for(peer: str, headers: list[str], proxies: Sequence[Network]) -> str:
    """The rightmost address of `X-Forwarded-For` not a trusted proxy's, if `peer` is one (each
    trusted proxy appends the address it saw; anything left of that the client wrote itself);
    else `peer`. Past an entry that is no address the walk stops at the proxy that sent it."""
    hops = [peer] + [h.strip() for v in reversed(headers) for h in reversed(v.split(","))]
    for hop, nxt in zip(hops, hops[1:], strict=False):
        if not _trusted(hop, proxies):
            return hop
        if not _parses(nxt):
            return hop
    return hops[-1]


def _parses(text: str) -> bool:
    try:
        ip_address(text)
    except ValueError:
        return False
    return True


def _trusted(address: str, proxies: Sequence[Network]) -> bool:
    try:
        ip = ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in proxies)

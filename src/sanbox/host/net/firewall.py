"""The nftables ruleset of a computer's namespace, rendered as text from data (pure, unit-tested)
and loaded atomically. Policy drop everywhere: a missing rule fails closed. Nothing is forwarded
out of the namespace at all; the guest's DNS goes to the DNS filter and its TCP 80/443 (and
allowed `cidr:port` flows) are redirected to the egress proxy's sockets in the namespace."""

from __future__ import annotations

import asyncio

from ..egress.policy import CidrRule
from .addresses import GATEWAY_IP, GUEST_IP, TAP
from .netns import NetworkError

DNS_PORT = 53
HTTP_PORT = 8080  # where guest TCP 80 is redirected
TLS_PORT = 8443  # where guest TCP 443 is redirected
DIRECT_PORT = 9000  # where allowed cidr:port flows are redirected
TABLE = "sanbox"


def ruleset(direct: tuple[CidrRule, ...] = ()) -> str:
    """The whole table, replacing any previous one in one transaction."""
    direct_rules = "\n".join(
        f'        iifname "{TAP}" ip daddr {rule.network} tcp dport {rule.port} '
        f"redirect to :{DIRECT_PORT}"
        for rule in direct
    )
    proxied = f"{{ {DNS_PORT}, {HTTP_PORT}, {TLS_PORT}, {DIRECT_PORT} }}"
    return f"""\
table inet {TABLE}
delete table inet {TABLE}
table inet {TABLE} {{
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        iifname "{TAP}" tcp dport 80 redirect to :{HTTP_PORT}
        iifname "{TAP}" tcp dport 443 redirect to :{TLS_PORT}
{direct_rules}
    }}
    chain input {{
        type filter hook input priority filter; policy drop;
        iif "lo" accept
        meta nfproto ipv6 counter drop
        ct state established,related accept
        iifname "{TAP}" ip saddr {GUEST_IP} ip daddr {GATEWAY_IP} udp dport {DNS_PORT} accept
        iifname "{TAP}" ip saddr {GUEST_IP} ip daddr {GATEWAY_IP} tcp dport {proxied} accept
        counter drop
    }}
    chain forward {{
        type filter hook forward priority filter; policy drop;
        counter drop
    }}
    chain output {{
        type filter hook output priority filter; policy accept;
        meta nfproto ipv6 drop
    }}
}}
"""


async def apply(netns: str, direct: tuple[CidrRule, ...] = ()) -> None:
    """Load the ruleset into the namespace (atomically: `nft -f` is one transaction)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            "ip",
            "netns",
            "exec",
            netns,
            "nft",
            "-f",
            "-",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError:
        from ..errors import MissingToolError

        raise MissingToolError("ip", "iproute2") from None
    _out, err = await proc.communicate(ruleset(direct).encode())
    if proc.returncode != 0:
        raise NetworkError(f"nft rejected the ruleset for {netns}: {err.decode().strip()}")

"""A computer's network addresses: the same in every namespace (guest 10.0.0.2/30, gateway
10.0.0.1 with one fixed MAC), so restored and forked guests keep working and no address planning
is needed. Nothing is routed out of a namespace: the server's DNS filter and egress proxy listen
inside it (see listen.py), so there is no per-computer uplink address to allocate.
"""

from __future__ import annotations

GUEST_IP = "10.0.0.2"
GATEWAY_IP = "10.0.0.1"
GUEST_CIDR = f"{GUEST_IP}/30"
GATEWAY_CIDR = f"{GATEWAY_IP}/30"
GUEST_MAC = "52:54:00:00:00:02"
GATEWAY_MAC = "52:54:00:00:00:01"
TAP = "tap0"


def netns_name(tag: str, computer_id: str) -> str:
    """`tag` names the data dir, so two Sanbox data dirs on one host never touch each other's."""
    return f"sb{tag}-{computer_id}"

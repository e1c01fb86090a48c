"""A computer's network slot: pure address arithmetic, no side effects.

Every computer's namespace looks the same from inside (guest 10.0.0.2/30, gateway 10.0.0.1 with
one fixed MAC), so restored and forked guests keep working. What differs per slot is the uplink:
a veth pair on a /30 of 10.200.0.0/16, its root-side end named `sbv<index>`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

GUEST_IP = "10.0.0.2"
GATEWAY_IP = "10.0.0.1"
GUEST_CIDR = f"{GUEST_IP}/30"
GATEWAY_CIDR = f"{GATEWAY_IP}/30"
GUEST_MAC = "52:54:00:00:00:02"
GATEWAY_MAC = "52:54:00:00:00:01"
TAP = "tap0"
UPLINK_POOL = ipaddress.IPv4Network("10.200.0.0/16")
MAX_SLOTS = UPLINK_POOL.num_addresses // 4


@dataclass(frozen=True)
class Slot:
    index: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < MAX_SLOTS:
            raise ValueError(f"slot {self.index} is outside 0..{MAX_SLOTS - 1}")

    @property
    def _base(self) -> ipaddress.IPv4Address:
        return UPLINK_POOL.network_address + 4 * self.index

    @property
    def host_ip(self) -> str:
        """The root-namespace end of the uplink (where the host's proxies listen)."""
        return str(self._base + 1)

    @property
    def ns_ip(self) -> str:
        """The computer-namespace end of the uplink."""
        return str(self._base + 2)

    @property
    def host_veth(self) -> str:
        return f"sbv{self.index}"

    @property
    def ns_veth(self) -> str:
        return "up0"

    @property
    def uplink_prefix(self) -> int:
        return 30


def netns_name(tag: str, computer_id: str) -> str:
    """`tag` names the data dir, so two Sanbox data dirs on one host never touch each other's."""
    return f"sb{tag}-{computer_id}"

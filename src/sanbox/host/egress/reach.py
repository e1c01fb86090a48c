"""Where computers may never go, whatever their allowlist says: this host, its neighbours and the
other tenants. A `cidr:port` rule is refused when it overlaps loopback, link-local (the cloud
metadata address), unspecified, multicast or reserved space, the computers' own network, any
address of this host, or a private range (RFC 1918, shared 100.64/10, benchmarking 198.18/15, IETF
192.0.0/24) the operator has not opened; an opened private range admits only rules that lie fully
inside it. The proxy applies the same check to every address it is about to dial, so a name that
resolves inward and a rule stored before a range was closed are refused at dial time too.

`address_refusal` and `network_refusal` are pure (the host's addresses and the operator's ranges
are arguments); `Reach` supplies both: the operator's ranges from the server's settings
(`SANBOX_TENANT_PRIVATE_RANGES`) and this host's interface addresses, read again at most every
few seconds."""

from __future__ import annotations

import array
import fcntl
import ipaddress
import socket
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from ipaddress import IPv4Address, IPv4Network

from ..net.addresses import GUEST_CIDR
from .policy import CidrRule, Policy, PolicyError

OPERATOR_SETTING = "SANBOX_TENANT_PRIVATE_RANGES"
HOST_ADDRESSES_TTL = 5.0  # seconds a reading of this host's addresses is reused
METADATA = IPv4Address("169.254.169.254")


def _networks(*pairs: tuple[str, str]) -> tuple[tuple[IPv4Network, str], ...]:
    return tuple((IPv4Network(net), what) for net, what in pairs)


# never reachable, not even by an operator's choice
NEVER = _networks(
    ("0.0.0.0/8", "the unspecified network"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local, where cloud metadata lives"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved space and broadcast"),
)
# the network inside every computer's namespace (inside 10/8: told after the private ranges)
OWN = _networks((str(IPv4Network(GUEST_CIDR, strict=False)), "the computers' own network"))
# reachable only inside a range the operator opened
PRIVATE = _networks(
    ("10.0.0.0/8", "a private range, RFC 1918"),
    ("172.16.0.0/12", "a private range, RFC 1918"),
    ("192.168.0.0/16", "a private range, RFC 1918"),
    ("100.64.0.0/10", "shared address space, RFC 6598"),
    ("198.18.0.0/15", "the benchmarking range, RFC 2544"),
    ("192.0.0.0/24", "IETF protocol assignments"),
)


def address_refusal(
    ip: str, host: Iterable[IPv4Address], open_ranges: Sequence[IPv4Network]
) -> str | None:
    """Why a computer may not be connected to `ip` (None if it may)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return "not an IP address"
    if not isinstance(addr, IPv4Address):
        return "IPv6 is off"
    if addr == METADATA:
        return "the metadata address"
    for net, what in NEVER:
        if addr in net:
            return f"a private or reserved address ({net}, {what})"
    for net, what in PRIVATE:
        if addr in net and not any(addr in r for r in open_ranges):
            return f"a private or reserved address ({net}, {what})"
    for net, what in OWN:
        if addr in net:
            return f"a private or reserved address ({net}, {what})"
    if addr in set(host):
        return "an address of this host"
    return None


def network_refusal(
    network: IPv4Network, host: Iterable[IPv4Address], open_ranges: Sequence[IPv4Network]
) -> str | None:
    """Why computers may not be given `network` (None if they may), as a sentence that ends
    saying what to do instead."""
    for net, what in NEVER:
        if network.overlaps(net):
            return _never(net, what)
    for net, what in PRIVATE:
        if network.overlaps(net) and not any(network.subnet_of(r) for r in open_ranges):
            opened = ", ".join(str(r) for r in open_ranges)
            inside = f" (open here: {opened})" if opened else ""
            return (
                f"it overlaps {net} ({what}), where this host, its neighbours and other tenants "
                "live. Allow public addresses only, or ask the operator to open the private range "
                f"this computer needs with {OPERATOR_SETTING}; a rule must lie fully inside an "
                f"opened range{inside}"
            )
    for net, what in OWN:
        if network.overlaps(net):
            return _never(net, what)
    mine = sorted(a for a in host if a in network)
    if mine:
        return (
            f"it includes {mine[0]}, an address of this Sanbox host, which computers may "
            "never reach. Allow a narrower range that leaves it out"
        )
    return None


def _never(net: IPv4Network, what: str) -> str:
    return (
        f"it overlaps {net} ({what}), which computers may never reach. Allow only the "
        "public addresses the computer needs"
    )


def parse_ranges(text: str | None) -> tuple[IPv4Network, ...]:
    """The operator's comma-separated ranges (`10.20.0.0/16,192.168.50.0/24`)."""
    ranges = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        try:
            ranges.append(IPv4Network(part.strip()))
        except ValueError as exc:
            why = f"{OPERATOR_SETTING}: {part.strip()!r} is not an IPv4 network: {exc}"
            raise ValueError(why) from None
    return tuple(ranges)


def read_host_addresses() -> frozenset[IPv4Address]:
    """Every IPv4 address on this host's interfaces, up or down (SIOCGIFCONF: one entry per
    address, secondary ones included)."""
    siocgifconf, ifreq = 0x8912, 40  # struct ifreq is 40 bytes on 64-bit Linux
    size = ifreq * 64
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        while True:
            buf = array.array("B", bytes(size))
            answer = fcntl.ioctl(
                sock.fileno(), siocgifconf, struct.pack("iL", size, buf.buffer_info()[0])
            )
            length = struct.unpack("iL", answer)[0]
            if length < size:
                break
            size *= 2
    data = buf.tobytes()
    return frozenset(IPv4Address(data[i + 20 : i + 24]) for i in range(0, length, ifreq))


class HostAddresses:
    """This host's addresses, read again when the last reading is older than `ttl` seconds."""

    def __init__(
        self,
        ttl: float = HOST_ADDRESSES_TTL,
        read: Callable[[], frozenset[IPv4Address]] = read_host_addresses,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl, self._read, self._clock = ttl, read, clock
        self._cached: tuple[float, frozenset[IPv4Address]] | None = None

    def __call__(self) -> frozenset[IPv4Address]:
        now = self._clock()
        if self._cached is None or now - self._cached[0] >= self.ttl:
            self._cached = (now, self._read())
        return self._cached[1]


class Reach:
    """The checks above with this host's addresses and the operator's open ranges filled in."""

    def __init__(
        self,
        open_ranges: Sequence[IPv4Network] = (),
        host_addresses: Callable[[], frozenset[IPv4Address]] | None = None,
    ) -> None:
        self.open_ranges = tuple(open_ranges)
        self.host_addresses = host_addresses or HostAddresses()

    @classmethod
    def of(cls, operator_ranges: str | None) -> Reach:
        return cls(parse_ranges(operator_ranges))

    def refusal(self, ip: str) -> str | None:
        return address_refusal(ip, self.host_addresses(), self.open_ranges)

    def rule_refusal(self, rule: CidrRule) -> str | None:
        return network_refusal(rule.network, self.host_addresses(), self.open_ranges)

    def policy(self, rules: list[str] | tuple[str, ...]) -> Policy:
        """The policy of `rules`, or PolicyError naming the first rule that is malformed or
        reaches where computers may not go, with why and what to do instead."""
        policy = Policy.of(rules)
        for rule in policy.cidrs:
            why = self.rule_refusal(rule)
            if why is not None:
                raise PolicyError(f"{str(rule)!r} is refused: {why}.")
        return policy

"""A tenant points an allow rule at this host, its neighbours, other tenants or the cloud metadata
service: refused at the API with why and what to do, and again for every address dialled."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network

import pytest

from sanbox.host.egress.policy import PolicyError
from sanbox.host.egress.reach import (
    HostAddresses,
    Reach,
    address_refusal,
    network_refusal,
    parse_ranges,
    read_host_addresses,
)

pytestmark = pytest.mark.unit

HOST = frozenset({IPv4Address("127.0.0.1"), IPv4Address("203.0.113.5"), IPv4Address("10.1.2.3")})
OPERATOR = parse_ranges("10.20.0.0/16, 192.168.50.0/24")


def reach(open_ranges: tuple[IPv4Network, ...] = ()) -> Reach:
    return Reach(open_ranges, lambda: HOST)


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ("10.0.0.0/8:22", "overlaps 10.0.0.0/8 (a private range, RFC 1918)"),
        ("192.168.1.0/24:5432", "overlaps 192.168.0.0/16 (a private range, RFC 1918)"),
        ("172.31.0.0/16:80", "overlaps 172.16.0.0/12"),
        ("100.64.0.0/10:22", "overlaps 100.64.0.0/10 (shared address space, RFC 6598)"),
        ("198.18.0.0/15:80", "overlaps 198.18.0.0/15"),
        ("169.254.169.254/32:80", "overlaps 169.254.0.0/16 (link-local, where cloud metadata"),
        ("127.0.0.1/32:7070", "overlaps 127.0.0.0/8 (loopback)"),
        ("224.0.0.0/4:5353", "overlaps 224.0.0.0/4 (multicast)"),
        ("0.0.0.0/0:443", "overlaps 0.0.0.0/8 (the unspecified network)"),
        ("255.255.255.255/32:9", "overlaps 240.0.0.0/4 (reserved space and broadcast)"),
        ("203.0.113.5/32:22", "it includes 203.0.113.5, an address of this Sanbox host"),
        ("203.0.113.0/24:22", "it includes 203.0.113.5, an address of this Sanbox host"),
        ("200.0.0.0/5:443", "it includes 203.0.113.5"),  # a public supernet of the host
    ],
)
def test_rules_reaching_inward_are_refused_with_why_and_what_to_do(rule: str, why: str) -> None:
    with pytest.raises(PolicyError) as info:
        reach().policy(["allowed.test", rule])
    message = str(info.value)
    assert message.startswith(f"{rule!r} is refused: ") and why in message, message
    assert "Allow " in message  # and what to do instead


def test_a_private_range_refusal_names_the_operator_setting() -> None:
    with pytest.raises(PolicyError) as info:
        reach().policy(["10.0.0.0/8:22"])
    assert "SANBOX_TENANT_PRIVATE_RANGES" in str(info.value)


@pytest.mark.parametrize(
    "rule", ["198.51.100.0/24:5432", "93.184.216.0/24:443", "8.8.8.8:53", "203.0.113.128/25:22"]
)
def test_public_ranges_are_accepted(rule: str) -> None:
    assert len(reach().policy([rule]).cidrs) == 1


def test_the_operator_opens_a_private_range_and_nothing_wider() -> None:
    opened = reach(OPERATOR)
    assert opened.policy(["10.20.0.0/16:5432", "10.20.7.0/24:22", "192.168.50.9:80"]).cidrs
    for rule in ("10.0.0.0/8:22", "10.20.0.0/15:22", "192.168.0.0/16:80", "10.21.0.0/16:22"):
        with pytest.raises(PolicyError) as info:
            opened.policy([rule])
        assert "open here: 10.20.0.0/16, 192.168.50.0/24" in str(info.value)


def test_an_opened_range_never_opens_the_host_loopback_or_metadata() -> None:
    wide = reach(parse_ranges("10.0.0.0/8"))
    for rule, why in (
        ("10.1.2.0/24:22", "an address of this Sanbox host"),
        ("10.0.0.0/24:80", "the computers' own network"),
    ):
        with pytest.raises(PolicyError, match=why):
            wide.policy([rule])
    assert network_refusal(IPv4Network("169.254.169.254/32"), (), parse_ranges("169.254.0.0/16"))
    assert network_refusal(IPv4Network("127.0.0.0/8"), (), parse_ranges("127.0.0.0/8"))


@pytest.mark.parametrize(
    ("ip", "why"),
    [
        ("10.1.2.3", "a private or reserved address (10.0.0.0/8"),
        ("172.20.0.1", "a private or reserved address (172.16.0.0/12"),
        ("192.168.1.1", "a private or reserved address (192.168.0.0/16"),
        ("127.0.0.1", "a private or reserved address (127.0.0.0/8"),
        ("169.254.169.254", "the metadata address"),
        ("169.254.1.1", "link-local"),
        ("100.64.0.1", "100.64.0.0/10"),
        ("0.0.0.0", "0.0.0.0/8"),
        ("224.0.0.1", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("203.0.113.5", "an address of this host"),
        ("::1", "IPv6 is off"),
        ("nonsense", "not an IP address"),
        ("198.51.100.10", None),
        ("93.184.216.34", None),
        ("203.0.113.6", None),
    ],
)
def test_addresses_dialled(ip: str, why: str | None) -> None:
    got = address_refusal(ip, HOST, ())
    assert got is None if why is None else (got is not None and why in got), got


def test_dialling_inside_an_opened_range_but_never_the_host_or_own_network() -> None:
    assert address_refusal("10.20.3.4", HOST, OPERATOR) is None
    assert address_refusal("10.21.3.4", HOST, OPERATOR) is not None
    wide = parse_ranges("10.0.0.0/8")
    assert address_refusal("10.1.2.3", HOST, wide) == "an address of this host"
    assert "the computers' own network" in (address_refusal("10.0.0.1", HOST, wide) or "")


def test_operator_ranges_are_checked_when_read() -> None:
    assert parse_ranges(None) == () and parse_ranges(" , ") == ()
    with pytest.raises(ValueError, match="SANBOX_TENANT_PRIVATE_RANGES: '10.20.0.0/33'"):
        parse_ranges("10.20.0.0/33")
    with pytest.raises(ValueError, match="is not an IPv4 network"):
        parse_ranges("10.20.0.1/16")  # host bits set: say what you mean


def test_this_hosts_addresses_are_read_and_cached_briefly() -> None:
    assert IPv4Address("127.0.0.1") in read_host_addresses()
    readings: list[int] = []
    now = [0.0]

    def read() -> frozenset[IPv4Address]:
        readings.append(1)
        return HOST

    addresses = HostAddresses(ttl=5.0, read=read, clock=lambda: now[0])
    assert addresses() == HOST and addresses() == HOST and len(readings) == 1
    now[0] = 5.0
    assert addresses() == HOST and len(readings) == 2

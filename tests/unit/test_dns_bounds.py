"""A host's DNS bounds are its operator's settings (SANBOX_EGRESS_DNS_RATE, _BURST, _CACHE_NAMES,
_HOST_CACHE_NAMES), read alike by the server and `sanbox host serve`, checked when read, and
given to every computer's resolver and DNS filter."""

from __future__ import annotations

import pytest

from sanbox.api.settings import ServerSettings
from sanbox.host.egress.dns_bounds import DnsBounds
from sanbox.host.egress.resolver import Resolver
from sanbox.host.settings import HostSettings, SettingsError

pytestmark = pytest.mark.unit

SET = {
    "SANBOX_EGRESS_DNS_RATE": "2.5",
    "SANBOX_EGRESS_DNS_BURST": "3",
    "SANBOX_EGRESS_DNS_CACHE_NAMES": "4",
    "SANBOX_EGRESS_DNS_HOST_CACHE_NAMES": "10",
}


def test_unset_they_are_the_defaults() -> None:
    assert HostSettings.from_env({}).dns_bounds == DnsBounds(100.0, 200, 1024, 65_536)


def test_a_host_s_settings_bound_every_computer_s_resolver_and_filter() -> None:
    bounds = HostSettings.from_env(SET).dns_bounds
    assert bounds == DnsBounds(2.5, 3, 4, 10)
    host = Resolver.of_host(("127.0.0.1", 53), bounds)
    computer = host.apart()
    assert computer.rate is not None
    assert (computer.rate.rate, computer.rate.burst) == (2.5, 3)
    assert computer._cache.size == 4 and computer._cache.room is host._cache.room
    assert computer._cache.room.total == 10
    dns = computer.bounds.query_rate()  # the DNS filter's, as the gateway makes it
    assert [dns.take(0.0) for _ in range(4)] == [True, True, True, False]


def test_the_server_reads_the_same_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SET.items():
        monkeypatch.setenv(name, value)
    assert ServerSettings.from_env().dns_bounds == DnsBounds(2.5, 3, 4, 10)


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("SANBOX_EGRESS_DNS_RATE", "fast", "not a number of queries a second"),
        ("SANBOX_EGRESS_DNS_RATE", "0", "above 0"),
        ("SANBOX_EGRESS_DNS_RATE", "nan", "above 0"),
        ("SANBOX_EGRESS_DNS_RATE", "1e9", "at most 100000"),
        ("SANBOX_EGRESS_DNS_BURST", "0", "positive whole number"),
        ("SANBOX_EGRESS_DNS_CACHE_NAMES", "-1", "positive whole number"),
        ("SANBOX_EGRESS_DNS_CACHE_NAMES", "70000", "from 1 name to the host's"),
        ("SANBOX_EGRESS_DNS_HOST_CACHE_NAMES", "99999999", "at most 10,000,000"),
    ],
)
def test_what_is_refused_says_why(name: str, value: str, said: str) -> None:
    with pytest.raises(SettingsError, match=said):
        HostSettings.from_env({name: value})

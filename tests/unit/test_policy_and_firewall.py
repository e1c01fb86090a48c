import ipaddress

import pytest

from sanbox.host.egress.policy import CidrRule, Policy, PolicyError
from sanbox.host.net import GATEWAY_IP, GUEST_IP, netns_name
from sanbox.host.net.firewall import DIRECT_PORT, HTTP_PORT, TLS_PORT, ruleset

pytestmark = pytest.mark.unit


def test_hosts_and_wildcards() -> None:
    p = Policy.of(["api.github.com", "*.pypi.org", "Files.Example.TEST."])
    assert p.allows_host("api.github.com") and p.allows_host("API.GitHub.com.")
    assert p.allows_host("files.pypi.org") and p.allows_host("a.b.pypi.org")
    assert not p.allows_host("pypi.org")  # a wildcard is for subdomains
    assert not p.allows_host("evilpypi.org") and not p.allows_host("github.com")
    assert p.allows_host("files.example.test")
    assert not Policy.of([]).allows_host("anything.test")


def test_cidr_rules() -> None:
    p = Policy.of(["198.51.100.0/24:5432", "203.0.113.7:22"])
    assert p.cidrs == (
        CidrRule(ipaddress.IPv4Network("198.51.100.0/24"), 5432),
        CidrRule(ipaddress.IPv4Network("203.0.113.7/32"), 22),
    )
    assert p.allows_direct("198.51.100.9", 5432) and not p.allows_direct("198.51.100.9", 5433)
    assert p.allows_direct("203.0.113.7", 22) and not p.allows_direct("203.0.113.8", 22)
    assert p.rules() == ["198.51.100.0/24:5432", "203.0.113.7/32:22"]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "http://x.test",
        "a b",
        "*.",
        "x..y",
        "1.2.3.4/40:80",
        "1.2.3.4:0",
        "-bad.test",
        "*.*.test",
    ],
)
def test_bad_rules_say_what_is_accepted(bad: str) -> None:
    with pytest.raises(PolicyError):
        Policy.of([bad])


def test_every_namespace_looks_the_same() -> None:
    assert netns_name("abc123", "cmp_x") == "sbabc123-cmp_x"
    assert (GUEST_IP, GATEWAY_IP) == ("10.0.0.2", "10.0.0.1")


def test_ruleset_fails_closed_and_redirects_to_the_proxy() -> None:
    text = ruleset(Policy.of(["198.51.100.0/24:5432"]).cidrs)
    assert text.startswith("table inet sanbox\ndelete table inet sanbox\n")  # atomic replace
    for chain in ("input", "forward"):
        assert (
            f"chain {chain} {{\n        type filter hook {chain} priority filter; policy drop;"
            in text
        )
    assert f'iifname "tap0" tcp dport 80 redirect to :{HTTP_PORT}' in text
    assert f'iifname "tap0" tcp dport 443 redirect to :{TLS_PORT}' in text
    assert f"ip daddr 198.51.100.0/24 tcp dport 5432 redirect to :{DIRECT_PORT}" in text
    assert "meta nfproto ipv6 counter drop" in text
    assert "masquerade" not in text and "accept\n    }\n    chain forward" not in text
    assert "redirect to :9000" not in ruleset()  # no cidr rule, no direct path

"""View link tokens: signed for one publication of one port of one computer of one org, by one
key, until an expiry; anything else about them (another target, a later time, a changed byte, a
shape of no token) opens nothing, without an exception."""

from __future__ import annotations

import pytest

from sanbox.api.ports.view_link import (
    MAX_TOKEN_CHARS,
    VIEW_LINK_MAX_TTL,
    VIEW_LINK_MIN_TTL,
    LinkTarget,
    ViewLinkSigner,
)

pytestmark = pytest.mark.unit

TARGET = LinkTarget("cmp_1", "org_1", 8080, "pub_1")
SIGNER = ViewLinkSigner(b"k" * 32)


def test_a_token_opens_its_target_until_it_expires() -> None:
    token, expires = SIGNER.mint(TARGET, "key_1", 600, now=1000)
    assert expires == 1600
    assert SIGNER.verify(token, TARGET, now=1000) == ("key_1", 1600)
    assert SIGNER.verify(token, TARGET, now=1600) == ("key_1", 1600)
    assert SIGNER.verify(token, TARGET, now=1601) is None
    assert "sbk_" not in token  # no API key in it


@pytest.mark.parametrize(
    "other",
    [
        LinkTarget("cmp_2", "org_1", 8080, "pub_1"),  # another computer
        LinkTarget("cmp_1", "org_2", 8080, "pub_1"),  # another org
        LinkTarget("cmp_1", "org_1", 8081, "pub_1"),  # another port
        LinkTarget("cmp_1", "org_1", 8080, "pub_2"),  # the port published again
        LinkTarget("", "", 0, ""),
    ],
)
def test_a_token_opens_nothing_but_its_target(other: LinkTarget) -> None:
    token, _ = SIGNER.mint(TARGET, "key_1", 600, now=1000)
    assert SIGNER.verify(token, other, now=1000) is None


def test_a_changed_token_opens_nothing() -> None:
    token, _ = SIGNER.mint(TARGET, "key_1", 600, now=1000)
    key_id, expires, mac = token.split(".")
    flipped = mac[:-1] + ("0" if mac[-1] != "0" else "1")
    for bad in (
        f"{key_id}.{expires}.{flipped}",
        f"{key_id}.{int(expires) + 86400}.{mac}",  # a later expiry
        f"key_2.{expires}.{mac}",  # another key
        f"{key_id}.{expires}.{mac}.view",
        f"{key_id}.{expires}",
        "",
        "garbage",
        f"{key_id}.{'9' * 5000}.{mac}",  # no int() of 5000 digits
        f"{key_id}.{expires}.{mac}é",  # non-ASCII is no exception
        f"{key_id}.{expires}.é",
        "é.é.é",
        token + "0" * MAX_TOKEN_CHARS,
    ):
        assert SIGNER.verify(bad, TARGET, now=1000) is None, bad
    assert ViewLinkSigner(b"j" * 32).verify(token, TARGET, now=1000) is None  # another server


def test_a_token_lasts_within_its_bounds() -> None:
    for ttl in (VIEW_LINK_MIN_TTL - 1, VIEW_LINK_MAX_TTL + 1, 0, -1):
        with pytest.raises(ValueError):
            SIGNER.mint(TARGET, "key_1", ttl)
    with pytest.raises(ValueError):
        SIGNER.mint(TARGET, "key.1", 600)
    assert SIGNER.mint(TARGET, "key_1", VIEW_LINK_MAX_TTL, now=0)[1] == VIEW_LINK_MAX_TTL

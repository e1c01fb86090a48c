"""What a secret proxy adds to a request's headers: the configured header overwritten (never
appended to), placeholders replaced only in the header the secret's rule names (any header if the
operator opts in), other hosts' secrets left alone, and the value kept out of every repr and
error."""

from __future__ import annotations

import pytest

from sanbox.host.egress.injection import (
    Injection,
    applies,
    foreign_placeholders,
    inject,
    placeholder_refusal,
)

pytestmark = pytest.mark.unit

VALUE = b"sk-live-0123456789abcdef"
OPENAI = Injection(
    hosts=("api.openai.com",),
    header=b"Authorization",
    template=b"Bearer {value}",
    placeholder=b"sbx_ph_3f9a0001",
    value=VALUE,
)
ANTHROPIC = Injection(("*.anthropic.com",), None, b"{value}", b"sbx_ph_aaaa0002", b"ant-key-42")


def test_the_header_is_overwritten_not_appended() -> None:
    guest = [(b"Host", b"api.openai.com"), (b"Authorization", b"Bearer guest-own"), (b"A", b"1")]
    out = inject(guest, "api.openai.com", [OPENAI])
    assert [v for n, v in out if n.lower() == b"authorization"] == [b"Bearer " + VALUE]
    assert (b"Host", b"api.openai.com") in out and (b"A", b"1") in out


def test_every_copy_is_removed_whatever_its_case() -> None:
    guest = [(b"authorization", b"x"), (b"AUTHORIZATION", b"y"), (b"Authorization", b"z")]
    out = inject(guest, "api.openai.com", [OPENAI])
    assert out == [(b"Authorization", b"Bearer " + VALUE)]


def test_the_placeholder_is_replaced_only_in_the_header_the_rule_names() -> None:
    guest = [
        (b"x-api-key", b"sbx_ph_aaaa0002"),
        (b"Cookie", b"k=sbx_ph_aaaa0002; other=1"),
        (b"Authorization", b"Bearer sbx_ph_aaaa0002"),
    ]
    out = inject(guest, "api.anthropic.com", [ANTHROPIC])  # placeholder-only: Authorization
    assert out == [*guest[:2], (b"Authorization", b"Bearer ant-key-42")]
    named = Injection(
        ("*.anthropic.com",),
        None,
        b"{value}",
        b"sbx_ph_aaaa0002",
        b"ant-key-42",
        placeholder_header=b"X-Api-Key",
    )
    out = inject(guest, "api.anthropic.com", [named])
    assert out == [(b"x-api-key", b"ant-key-42"), *guest[1:]]
    echoed = [(b"X-Debug", b"sbx_ph_3f9a0001"), (b"Authorization", b"Bearer mine")]
    out = inject(echoed, "api.openai.com", [OPENAI])  # a header rule: its own header only
    assert out == [(b"X-Debug", b"sbx_ph_3f9a0001"), (b"Authorization", b"Bearer " + VALUE)]


def test_the_operator_may_let_the_placeholder_go_in_any_header() -> None:
    anywhere = Injection(
        ("*.anthropic.com",), None, b"{value}", b"sbx_ph_aaaa0002", b"ant-key-42", any_header=True
    )
    guest = [
        (b"x-api-key", b"sbx_ph_aaaa0002"),
        (b"Cookie", b"k=sbx_ph_aaaa0002; other=1"),
        (b"Host", b"sbx_ph_aaaa0002"),
    ]
    out = inject(guest, "api.anthropic.com", [anywhere])
    assert out == [
        (b"x-api-key", b"ant-key-42"),
        (b"Cookie", b"k=ant-key-42; other=1"),
        (b"Host", b"sbx_ph_aaaa0002"),
    ]


def test_a_strict_proxy_refuses_a_placeholder_in_another_header() -> None:
    guest = [(b"X-Debug", b"sbx_ph_aaaa0002")]
    why = placeholder_refusal(guest, "api.anthropic.com", [ANTHROPIC])
    assert why is not None and "X-Debug" in why and "authorization" in why
    assert b"ant-key" not in why.encode()
    fine = [(b"Authorization", b"Bearer sbx_ph_aaaa0002")]
    assert placeholder_refusal(fine, "api.anthropic.com", [ANTHROPIC]) is None


def test_a_host_it_does_not_list_is_untouched() -> None:
    guest = [(b"Authorization", b"Bearer mine"), (b"x-api-key", b"sbx_ph_3f9a0001")]
    assert inject(guest, "example.com", [OPENAI, ANTHROPIC]) == guest
    assert inject(guest, "api.openai.com.evil.test", [OPENAI]) == guest


def test_another_hosts_placeholder_passes_unchanged() -> None:
    guest = [(b"x-api-key", b"sbx_ph_aaaa0002")]
    out = inject(guest, "api.openai.com", [OPENAI, ANTHROPIC])
    assert (b"x-api-key", b"sbx_ph_aaaa0002") in out


@pytest.mark.parametrize(
    ("name", "matches"),
    [
        ("api.anthropic.com", True),
        ("a.b.anthropic.com", True),
        ("API.Anthropic.COM.", True),
        ("anthropic.com", False),
        ("evilanthropic.com", False),
        ("anthropic.com.evil.test", False),
    ],
)
def test_wildcards_match_below_the_name_only(name: str, matches: bool) -> None:
    assert applies(ANTHROPIC, name) is matches


def test_exact_names_match_exactly() -> None:
    assert applies(OPENAI, "API.OPENAI.COM")
    assert not applies(OPENAI, "x.api.openai.com")


def test_the_value_never_shows() -> None:
    assert b"sk-live" not in repr(OPENAI).encode() and "sk-live" not in str(OPENAI)
    with pytest.raises(ValueError) as bad:
        Injection(("a.test",), b"X-Key", b"{value}", b"sbx_ph_00000000", b"sk-bad\r\nInjected: 1")
    assert "sk-bad" not in str(bad.value)


@pytest.mark.parametrize("header", [b"Host", b"content-length", b"Transfer-Encoding", b"bad name"])
def test_framing_headers_cannot_carry_a_secret(header: bytes) -> None:
    with pytest.raises(ValueError):
        Injection(("a.test",), header, b"{value}", b"sbx_ph_00000000", b"k")


def test_a_short_placeholder_is_refused() -> None:
    with pytest.raises(ValueError):
        Injection(("a.test",), None, b"{value}", b"", b"k")


def test_foreign_placeholders_are_those_of_other_hosts() -> None:
    guest = [(b"x-api-key", b"sbx_ph_aaaa0002"), (b"Authorization", b"Bearer sbx_ph_3f9a0001")]
    assert foreign_placeholders(guest, "api.openai.com", [OPENAI, ANTHROPIC]) == [ANTHROPIC]
    assert foreign_placeholders(guest, "example.com", [OPENAI, ANTHROPIC]) == [OPENAI, ANTHROPIC]
    assert foreign_placeholders([(b"A", b"b")], "example.com", [OPENAI]) == []

"""Console sessions and login links: expiry, bounds, one-time links."""

from __future__ import annotations

import pytest

from sanbox.console import sessions as sessions_mod
from sanbox.console.sessions import ABSOLUTE, IDLE, LINK_TTL, PER_KEY, Sessions

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_is_found_by_its_token_only() -> None:
    s = Sessions(Clock())
    token, session = s.open("key_1")
    assert s.find(token) is session
    assert s.find(token + "x") is None and s.find(None) is None and s.find("a" * 500) is None
    assert token not in repr(s._sessions)  # only its digest is kept


def test_sessions_expire_when_idle_and_after_their_lifetime() -> None:
    clock = Clock()
    s = Sessions(clock)
    token, _ = s.open("key_1")
    clock.now += IDLE + 1
    assert s.find(token) is None
    token, _ = s.open("key_1")
    for _ in range(int(ABSOLUTE // (IDLE / 2)) + 1):
        clock.now += IDLE / 2
        found = s.find(token)
    assert found is None


def test_a_check_that_is_not_a_request_does_not_keep_a_session_alive() -> None:
    clock = Clock()
    s = Sessions(clock)
    token, _ = s.open("key_1")
    for _ in range(3):
        clock.now += IDLE / 2
        s.find(token, touch=False)
    assert s.find(token) is None


def test_a_key_keeps_at_most_its_share_of_sessions() -> None:
    s = Sessions(Clock())
    tokens = [s.open("key_1")[0] for _ in range(PER_KEY + 3)]
    assert s.find(tokens[0]) is None
    assert s.find(tokens[-1]) is not None
    assert len(s) == PER_KEY


def test_the_store_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions_mod, "CAPACITY", 5)
    s = Sessions(Clock())
    for i in range(20):
        s.open(f"key_{i}")
    assert len(s) == 5


def test_a_login_link_works_once_and_expires() -> None:
    clock = Clock()
    s = Sessions(clock)
    link = s.make_link("key_1")
    assert s.spend_link(link) == "key_1"
    assert s.spend_link(link) is None
    late = s.make_link("key_1")
    clock.now += LINK_TTL + 1
    assert s.spend_link(late) is None

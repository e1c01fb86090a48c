"""Console sessions and login links, kept in a real (migrated) SQLite store: expiry, bounds (one
org's never ending another's), one-time links, and a session one server opened found by another
over the same database."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from sanbox.console import sessions as sessions_mod
from sanbox.console.sessions import ABSOLUTE, IDLE, LINK_TTL, PER_KEY, Sessions
from sanbox.store import Database
from sanbox.store.models import ApiKey, ConsoleSessionRow, LoginLinkRow, Org

pytestmark = pytest.mark.component


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_is_found_by_its_token_only_on_every_node(db: Database) -> None:
    s, other_node = Sessions(db, Clock()), Sessions(db, Clock())
    token, session = s.open("key_1")
    assert s.find(token) == session and other_node.find(token) == session
    assert s.find(token + "x") is None and s.find(None) is None and s.find("a" * 500) is None
    with db.session() as kept:  # only its digest is kept
        rows = kept.execute(select(ConsoleSessionRow.digest, ConsoleSessionRow.csrf)).all()
    assert len(rows) == 1 and token not in repr(rows)
    other_node.close(token)
    assert s.find(token) is None


def test_sessions_expire_when_idle_and_after_their_lifetime(db: Database) -> None:
    clock = Clock()
    s = Sessions(db, clock)
    token, _ = s.open("key_1")
    clock.now += IDLE + 1
    assert s.find(token) is None
    token, _ = s.open("key_1")
    for _ in range(int(ABSOLUTE // (IDLE / 2)) + 1):
        clock.now += IDLE / 2
        found = s.find(token)
    assert found is None


def test_a_check_that_is_not_a_request_does_not_keep_a_session_alive(db: Database) -> None:
    clock = Clock()
    s = Sessions(db, clock)
    token, _ = s.open("key_1")
    for _ in range(3):
        clock.now += IDLE / 2
        s.find(token, touch=False)
    assert s.find(token) is None


def test_a_key_keeps_at_most_its_share_of_sessions(db: Database) -> None:
    clock = Clock()
    s = Sessions(db, clock)
    tokens = []
    for _ in range(PER_KEY + 3):
        tokens.append(s.open("key_1")[0])
        clock.now += 1
    assert s.find(tokens[0]) is None
    assert s.find(tokens[-1]) is not None
    assert len(s) == PER_KEY


def test_the_store_is_bounded(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions_mod, "CAPACITY", 5)
    s = Sessions(db, Clock())
    for i in range(20):
        s.open(f"key_{i}")
    assert len(s) == 5


def test_a_login_link_works_once_and_expires(db: Database) -> None:
    clock = Clock()
    s, other_node = Sessions(db, clock), Sessions(db, clock)
    link = s.make_link("key_1")
    assert other_node.spend_link(link) == "key_1"
    assert s.spend_link(link) is None
    with db.session() as kept:
        assert kept.scalars(select(LoginLinkRow.digest)).all() == []
    late = s.make_link("key_1")
    clock.now += LINK_TTL + 1
    assert s.spend_link(late) is None


def _keys(db: Database, org: str, count: int) -> list[str]:
    """`count` keys of org `org` (made if need be) in the store: their ids."""
    with db.session() as s:
        if s.get(Org, org) is None:
            s.add(Org(id=org, name=org))
            s.flush()
        ids = [f"key_{org}_{i}" for i in range(count)]
        for key_id in ids:
            s.add(ApiKey(id=key_id, org_id=org, prefix=key_id[:16], hash=key_id))
    return ids


def test_one_orgs_logins_and_links_never_end_another_orgs(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessions_mod, "PER_ORG", 6)
    monkeypatch.setattr(sessions_mod, "CAPACITY", 8)  # one org's share fits, two do not
    monkeypatch.setattr(sessions_mod, "LINKS_PER_ORG", 4)
    monkeypatch.setattr(sessions_mod, "LINKS", 5)
    clock = Clock()
    s = Sessions(db, clock)
    (victim,) = _keys(db, "org_victim", 1)
    token, _ = s.open(victim)
    link = s.make_link(victim)
    attacker = _keys(db, "org_attacker", 5)  # many keys, each within its own share
    for key_id in attacker:
        for _ in range(PER_KEY):
            clock.now += 1
            s.open(key_id)
        s.make_link(key_id)
    assert s.find(token) is not None, "another org's logins ended this session"
    assert len(s) == 6 + 1  # the attacker's org holds its share, its oldest gone
    assert s.spend_link(link) == victim, "another org's links ended this link"

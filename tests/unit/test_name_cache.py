"""A computer's cache of resolved names: kept for their TTL, its own bound dropping its own
oldest, and the host's bound over every computer's cache never making one drop another's."""

from __future__ import annotations

import pytest

from sanbox.host.egress.name_cache import CacheRoom, NameCache

pytestmark = pytest.mark.unit

ONE = ["192.0.2.1"]


def test_kept_for_the_ttl_least_recently_used_first_out() -> None:
    cache = NameCache(size=2)
    cache.put("a.test", ONE, until=130.0, now=100.0)
    assert cache.get("a.test", 129.0) == ONE
    assert cache.get("a.test", 130.0) is None  # the TTL has passed
    assert len(cache) == cache.room.used == 0

    cache.put("a.test", ONE, until=200.0, now=100.0)
    cache.put("b.test", ONE, until=200.0, now=100.0)
    cache.get("a.test", 101.0)  # a is used: b is the oldest
    cache.put("c.test", ONE, until=200.0, now=101.0)
    assert cache.get("b.test", 101.0) is None
    assert cache.get("a.test", 101.0) == cache.get("c.test", 101.0) == ONE
    assert cache.room.used == 2


def test_names_past_their_ttl_make_room_first() -> None:
    cache = NameCache(size=2)
    cache.put("old.test", ONE, until=110.0, now=100.0)
    cache.put("kept.test", ONE, until=500.0, now=100.0)
    cache.put("new.test", ONE, until=500.0, now=200.0)  # old.test's TTL has passed
    assert cache.get("kept.test", 200.0) == cache.get("new.test", 200.0) == ONE


def test_one_cache_flooded_never_drops_another_s_names() -> None:
    room = CacheRoom(total=6)
    quiet, flood = NameCache(size=4, room=room), NameCache(size=4, room=room)
    quiet.put("mine.test", ONE, until=1000.0, now=0.0)
    for i in range(5000):
        flood.put(f"n{i}.attacker.test", ONE, until=1000.0, now=0.0)
    assert len(flood) == 4  # its own bound: it dropped its own
    assert quiet.get("mine.test", 1.0) == ONE
    assert room.used == 5


def test_the_host_bound_holds_and_a_closed_cache_gives_its_room_back() -> None:
    room = CacheRoom(total=3)
    first, second, third = (NameCache(size=2, room=room) for _ in range(3))
    for name in ("a.test", "b.test"):
        first.put(name, ONE, until=1000.0, now=0.0)
    second.put("c.test", ONE, until=1000.0, now=0.0)
    third.put("d.test", ONE, until=1000.0, now=0.0)  # the host is full: it keeps nothing
    assert (len(third), room.used) == (0, 3)
    second.put("e.test", ONE, until=1000.0, now=0.0)  # it drops its own to keep another
    assert second.get("c.test", 1.0) is None and second.get("e.test", 1.0) == ONE
    assert first.get("a.test", 1.0) == first.get("b.test", 1.0) == ONE

    first.close()
    assert (len(first), room.used) == (0, 1)
    first.put("late.test", ONE, until=1000.0, now=2.0)  # a lookup that ends after the close
    assert (len(first), room.used) == (0, 1)
    third.put("d.test", ONE, until=1000.0, now=2.0)
    assert third.get("d.test", 3.0) == ONE


def test_names_past_their_ttl_stop_holding_the_host_s_bound() -> None:
    """A computer that stopped asking keeps its names' room only until their TTL: once the
    host's bound is reached, a new name of another computer sweeps them and is kept (a name
    whose TTL has not passed stays). Sweeps read every name, so they come at most once every
    `SWEEP_EVERY`."""
    room = CacheRoom(total=3)
    quiet, busy = NameCache(size=3, room=room), NameCache(size=3, room=room)
    quiet.put("a.test", ONE, until=110.0, now=100.0)
    quiet.put("b.test", ONE, until=110.0, now=100.0)
    quiet.put("c.test", ONE, until=500.0, now=100.0)
    assert room.used == room.total
    busy.put("new.test", ONE, until=500.0, now=200.0)
    assert busy.get("new.test", 200.0) == ONE
    assert len(quiet) == 1 and quiet.get("c.test", 200.0) == ONE
    assert room.used == 2

    quiet.put("d.test", ONE, until=200.5, now=200.0)  # the host is full again
    third = NameCache(size=3, room=room)  # holds none: keeps none while the host is full
    third.put("soon.test", ONE, until=500.0, now=200.6)  # d.test has passed, but swept at 200
    assert third.get("soon.test", 200.6) is None and room.used == 3
    third.put("later.test", ONE, until=500.0, now=201.0)
    assert third.get("later.test", 201.0) == ONE and len(quiet) == 1 and room.used == 3

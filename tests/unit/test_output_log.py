"""The held output of a kept process (guest/output_log.py): bounded, oldest dropped with no
reader, a reader resumes from what it has and is told what it can no longer get."""

from __future__ import annotations

import pytest

from sanbox.guest.output_log import OVERHEAD, OutputLog

pytestmark = pytest.mark.unit


def drain(log: OutputLog) -> list[tuple[int, bytes]]:
    out = []
    while (piece := log.take(1 << 20)) is not None:
        out.append(piece)
    return out


def test_a_reader_gets_the_bytes_in_order_from_where_it_was() -> None:
    log = OutputLog(limit=4096)
    log.add(1, b"one ")
    log.add(2, b"err ")
    log.add(1, b"two")
    assert log.start({1: 2}) == {}
    assert drain(log) == [(1, b"e "), (2, b"err "), (1, b"two")]
    log.add(1, b"!")
    assert log.pending() == 1 and drain(log) == [(1, b"!")]


def test_with_no_reader_the_oldest_go_and_a_reader_is_told() -> None:
    log = OutputLog(limit=1000)
    log.add(1, b"a" * 900)
    log.add(2, b"b" * 100)  # a new piece: it costs OVERHEAD too
    log.add(2, b"c" * 400)
    assert log.total == {1: 900, 2: 500}
    lost = log.start({})
    kept = drain(log)
    held = sum(len(data) for _, data in kept)
    assert lost[1] + held + lost.get(2, 0) == 1400
    assert kept[-1] == (2, b"b" * 100 + b"c" * 400)  # newest kept whole, joined into one piece
    assert held + OVERHEAD * len(kept) <= 1000


def test_an_attached_reader_holds_the_writer_back_instead_of_losing_bytes() -> None:
    log = OutputLog(limit=2000)
    log.start({})
    room = log.room()
    assert room == 2000 - OVERHEAD
    log.add(1, b"x" * room)
    assert log.room() == 0  # the process waits, as on a full pipe
    assert log.take(500) == (1, b"x" * 500)
    assert log.room() > 0
    log.add(1, b"y" * log.room())  # pushes out only bytes the reader already took
    got = b"".join(data for _, data in drain(log))
    assert got == b"x" * (room - 500) + b"y" * (len(got) - room + 500)
    log.stop()
    assert log.room() == 2000 and log.take(10) is None


def test_a_reader_ahead_of_the_log_or_missing_a_channel() -> None:
    log = OutputLog(limit=4096)
    log.add(1, b"abc")
    assert log.start({1: 99, 2: 5}) == {}  # more than was produced: it has everything
    assert drain(log) == []
    log.add(2, b"z")
    assert drain(log) == [(2, b"z")]  # offsets past the end count as the end

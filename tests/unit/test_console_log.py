"""A guest flooding its console: the log is rotated to a bounded size while the writer keeps
appending (as QEMU does, O_APPEND), and a tail still reads the last lines across the rotation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sanbox.host.data.layout import DataDir
from sanbox.host.machines import console

pytestmark = pytest.mark.unit


def appender(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def test_a_log_over_the_limit_keeps_its_last_bytes_in_the_rotated_file(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    fd = appender(log)
    try:
        os.write(fd, b"".join(b"line %06d\n" % i for i in range(1000)))  # 12,000 bytes
        assert not console.rotate(log, rotate_at=20_000)
        assert console.rotate(log, rotate_at=1200)
        assert log.stat().st_size == 0
        assert console.rotated(log).read_bytes() == b"".join(
            b"line %06d\n" % i for i in range(900, 1000)
        )
        os.write(fd, b"after\n")  # the writer's next append lands at the new end: no hole
        assert log.read_bytes() == b"after\n"
        assert console.lines(log, 3) == ["line 000998", "line 000999", "after"]
    finally:
        os.close(fd)


def test_a_flood_stays_bounded_by_rotation(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    fd = appender(log)
    try:
        for _ in range(200):  # 200 sweeps, each after 64 KiB more (12.5 MiB in all)
            os.write(fd, b"x" * 65535 + b"\n")
            console.rotate(log, rotate_at=256 * 1024)
            older = console.rotated(log)
            size = log.stat().st_size + (older.stat().st_size if older.exists() else 0)
            assert size <= 2 * 256 * 1024
        assert console.rotated(log).stat().st_size == 256 * 1024
    finally:
        os.close(fd)


def test_a_sweep_rotates_every_computer_and_skips_what_is_not_one(tmp_path: Path) -> None:
    dd = DataDir(tmp_path)
    dd.ensure()
    for cid in ("cmp_a", "cmp_b"):
        dd.computer(cid).logs.mkdir(parents=True)
        dd.computer(cid).console_log.write_bytes(b"y" * (console.ROTATE_AT + 1))
    (dd.computers / "cmp_c").mkdir()  # no log yet (booting)
    (dd.computers / "NOT A COMPUTER").mkdir()
    assert console.sweep(dd) == 2
    assert console.sweep(dd) == 0
    for cid in ("cmp_a", "cmp_b"):
        log = dd.computer(cid).console_log
        assert log.stat().st_size == 0
        assert console.rotated(log).stat().st_size == console.ROTATE_AT


def test_lines_read_across_the_rotation_and_missing_files(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    assert console.lines(log) == []
    console.rotated(log).write_bytes(b"one\ntw")
    log.write_bytes(b"o\nthree\n")  # a line split by the rotation joins up again
    assert console.lines(log, 10) == ["one", "two", "three"]
    assert console.tail(log, 2) == "two | three"

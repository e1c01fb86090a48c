"""A saved state written from a migration stream that carries RAM, then claimed for a mapped
resume: the memory file moves (no copy), is checked where it lies, and a changed or missing file
is refused with the reason users see."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from sanbox.host.drivers.qemu import stream as memstream
from sanbox.host.drivers.qemu.stream import SECTION_PART
from sanbox.host.saved import mapped_memory, memory
from sanbox.host.saved.memory import StateError

from .test_memstream import RAM, page, section, stream, zero

pytestmark = pytest.mark.unit
KEY = bytes(range(32))
COMPAT = {"vcpus": 1, "memory_mib": 1}
# the stream's split as write_from_stream takes it (a driver's split_saved_state: no page count)
SPLIT = cast("Callable[[Path, Path, Path, int], None]", memstream.split)


def saved_state(tmp_path: Path) -> tuple[Path, memory.SavedState]:
    state = tmp_path / "state"
    state.mkdir()
    part = page(0, "ram", 3) + zero(4096, None) + page(RAM - 4096, "ram", 4)
    (state / "vmstate.tmp").write_bytes(stream(section(SECTION_PART, 2, part)))
    saved = memory.write_from_stream(
        state, state / "vmstate.tmp", RAM, COMPAT, time.monotonic(), KEY, SPLIT
    )
    assert sorted(p.name for p in state.iterdir()) == ["manifest.json", "memory", "vmstate"]
    return state, saved


def test_a_stream_state_is_claimed_without_a_copy(tmp_path: Path) -> None:
    state, saved = saved_state(tmp_path)
    assert saved.memory_bytes == RAM and saved.memory_allocated >= 2 * 4096
    inode = (state / memory.MEMORY).stat().st_ino
    loaded = memory.load(state, COMPAT, KEY)
    mapped = mapped_memory.mapped_file(tmp_path / "run")
    mapped_memory.take_memory(state, mapped)
    mapped_memory.check_taken(mapped, loaded, KEY)
    assert mapped.stat().st_ino == inode and not (state / memory.MEMORY).exists()
    data = mapped.read_bytes()
    assert data[:4096] == b"\x03" * 4096 and data[-4096:] == b"\x04" * 4096
    assert data.count(0) == RAM - 2 * 4096


def test_a_changed_memory_file_is_refused_and_not_left_to_map(tmp_path: Path) -> None:
    state, _ = saved_state(tmp_path)
    with open(state / memory.MEMORY, "r+b") as f:
        f.seek(RAM // 2)
        f.write(b"\x01")  # in a hole: must be zeros
    loaded = memory.load(state, COMPAT, KEY)
    mapped = mapped_memory.mapped_file(tmp_path / "run")
    mapped_memory.take_memory(state, mapped)
    with pytest.raises(StateError) as err:
        mapped_memory.check_taken(mapped, loaded, KEY)
    assert err.value.reason == "corrupt" and not mapped.exists()


def test_a_missing_memory_file_is_said(tmp_path: Path) -> None:
    state, saved = saved_state(tmp_path)
    (state / memory.MEMORY).unlink()
    with pytest.raises(StateError) as err:
        mapped_memory.take_memory(state, mapped_memory.mapped_file(tmp_path / "run"))
    assert err.value.reason == "missing"


def test_a_stream_not_understood_leaves_no_state(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "vmstate.tmp").write_bytes(b"QEVM" + bytes(40))
    with pytest.raises(memory.PauseError, match="migration stream"):
        memory.write_from_stream(state, state / "vmstate.tmp", RAM, COMPAT, 0.0, KEY, SPLIT)
    assert list(state.iterdir()) == []

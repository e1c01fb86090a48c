"""The RAM dir is the budget for guests' RAM: a guest resumed from mapped saved memory has no RAM
file there, yet its RAM may grow to its size, so admission counts it (else resumed guests would
escape the budget and the host would overcommit its memory). A mapped file left by a VM that
ended without Sanbox (a host reboot) is not counted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sanbox.host.data import space
from sanbox.host.data.layout import DataDir
from sanbox.host.saved import mapped_memory

pytestmark = pytest.mark.unit
MIB = 1024 * 1024


def test_mapped_saved_memory_is_promised_against_the_ram_dir(tmp_path: Path) -> None:
    ram_dir, dd = tmp_path / "shm", DataDir(tmp_path / "data")
    ram_dir.mkdir()
    with open(ram_dir / "sanbox-t-booted.ram", "wb") as f:
        f.truncate(64 * MIB)  # a booted guest's sparse RAM file: all still to come
    for computer_id, pid in (("resumed", os.getpid()), ("other", os.getpid()), ("ended", 0)):
        mapped = mapped_memory.mapped_file(dd.computer(computer_id).run)
        mapped.parent.mkdir(parents=True)
        with open(mapped, "wb") as f:
            f.truncate(128 * MIB)
        (mapped.parent / "vm.pid").write_text(f"{pid or 2**22 + 1}\n")  # "ended": no such pid
    assert space.ram_room(ram_dir).promised == 64 * MIB  # without the data dir: files only
    assert space.ram_room(ram_dir, None, dd).promised == (64 + 2 * 128) * MIB
    assert space.ram_room(ram_dir, "resumed", dd).promised == (64 + 128) * MIB  # its own

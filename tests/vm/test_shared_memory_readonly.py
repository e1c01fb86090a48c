"""A memory image many VMs start from is read-only to every one of them, on real guests: after
computers are made from a snapshot with memory (as ready snapshots and pool members are) and
after a fork, the snapshot's memory file is root's with no write bit for the VMs, no QEMU holds it
(or any file with other names) open for writing or maps it shared, and its digest is what it was
after the clones ran and wrote their memory."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sanbox.host.image import Image
from sanbox.host.runtime import HostRuntime, Machine, MachineSpec
from sanbox.host.saved import mapped_memory, memory

from .conftest import MakeMachine
from .test_snapshots_host import MEMORY_MIB, new_id, sh, snapshots_made, spec_of
from .test_snapshots_host import from_snapshot as from_snapshot_fixture
from .test_snapshots_host import take as take_fixture

FIXTURES = (snapshots_made, from_snapshot_fixture, take_fixture)  # used by name, as fixtures

pytestmark = pytest.mark.vm
Run = Callable[..., Any]
FILL = "dd if=/dev/urandom of=/run/fill bs=1M count=64 2>/dev/null; sync; echo written"


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def open_files(pid: int) -> list[tuple[os.stat_result, int]]:
    """Each regular file QEMU `pid` holds open: its stat and its open flags (fdinfo)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            st = os.stat(f"/proc/{pid}/fd/{fd}")
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            flags = next(int(line.split()[1], 8) for line in info.splitlines() if "flags" in line)
            found.append((st, flags))
    return found


def shared_writable_maps(pid: int, inode: int) -> list[str]:
    """Lines of /proc/PID/maps that map `inode` shared and writable (`rw-s`)."""
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return [
        ln
        for ln in lines
        if len(ln.split()) > 4
        and int(ln.split()[4]) == inode
        and ln.split()[1].startswith("rw")
        and ln.split()[1][3] == "s"
    ]


def assert_cannot_touch(machine: Machine, image: Path | None) -> None:
    """The VM's QEMU may write no file with other names (a snapshot's memory, another VM's) and
    holds `image` (the snapshot's memory file), if at all, read-only and mapped privately."""
    pid = machine.vm.pid
    for st, flags in open_files(pid):
        if flags & os.O_ACCMODE != os.O_RDONLY:
            assert st.st_nlink == 1, f"QEMU {pid} writes a file with {st.st_nlink} names"
    if image is not None:
        inode = image.stat().st_ino
        assert not shared_writable_maps(pid, inode)
        for st, flags in open_files(pid):
            if st.st_ino == inode:
                assert flags & os.O_ACCMODE == os.O_RDONLY
    mapped = mapped_memory.mapped_file(machine.vm.run_dir)
    if mapped.exists() and mapped.stat().st_nlink > 1:  # a shared image (QEMU >= 8.2)
        st = mapped.stat()
        assert st.st_uid == 0 and st.st_mode & 0o222 == 0, oct(st.st_mode)


def assert_roots_and_unwritable(image: Path) -> None:
    st = image.stat()
    assert st.st_uid == 0, f"the shared memory file belongs to uid {st.st_uid}"
    assert st.st_mode & 0o022 == 0, oct(st.st_mode)  # neither the VMs' group nor others write


def test_computers_from_a_snapshot_cannot_write_its_memory(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    run: Run,
    from_snapshot_fixture: Callable[..., tuple[Machine, Any]],
    take_fixture: Callable[..., tuple[str, Any]],
) -> None:
    from_snapshot, take = from_snapshot_fixture, take_fixture
    source = make_machine(memory_mib=MEMORY_MIB)
    sh(run, source, "echo before > /run/note")
    sid, snap = take(source, True)
    image = runtime.snapshots.memory_dir(sid) / memory.MEMORY
    digest = sha256(image)
    clones = []
    for _ in range(2):
        clone, outcome = from_snapshot(sid)
        assert outcome is not None and outcome.restored, outcome
        clones.append(clone)
    for clone in clones:
        assert sh(run, clone, "cat /run/note") == "before"
        assert sh(run, clone, FILL) == "written"  # the guest writes much of its memory
        assert_cannot_touch(clone, image)
    assert_roots_and_unwritable(image)
    assert sha256(image) == digest  # the snapshot's memory is what it was
    third, outcome = from_snapshot(sid)  # and still makes good computers
    assert outcome is not None and outcome.restored
    assert sh(run, third, "test -e /run/fill || echo absent") == "absent"


def test_forks_cannot_write_their_sources_memory(
    make_machine: MakeMachine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    parent = make_machine(memory_mib=MEMORY_MIB)
    sh(run, parent, "echo parent > /run/parent-tmp")
    specs = []
    for _ in range(2):
        cid = new_id("frk")
        runtime.created.append(cid)  # type: ignore[attr-defined]
        specs.append(MachineSpec(computer_id=cid, hostname=cid, memory_mib=MEMORY_MIB))
    forks = run(runtime.fork(parent, spec_of(parent), image, specs), 600)
    runtime.booted.extend(forks)  # type: ignore[attr-defined]
    for fork in forks:
        assert sh(run, fork, "cat /run/parent-tmp") == "parent"
        assert sh(run, fork, FILL) == "written"
        assert_cannot_touch(fork, None)
    links = [mapped_memory.mapped_file(f.vm.run_dir) for f in forks]
    shared = [p for p in links if p.exists() and p.stat().st_nlink > 1]
    if shared:  # QEMU >= 8.2: the forks map one image; it stays root's and unchanged
        assert len({p.stat().st_ino for p in shared}) == 1
        assert_roots_and_unwritable(shared[0])
    for fork in forks:
        assert sh(run, fork, "cat /run/parent-tmp") == "parent"

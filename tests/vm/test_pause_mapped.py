"""A resume maps the saved memory privately instead of copying it back: the guest's writes never
reach the saved file, a resumed computer pauses again (the pages its guest wrote put into that
file, the rest not read; or, where the file is not its own, its RAM taken out of the migration
stream) and resumes with what it had then, and a restore that goes wrong (the memory file gone,
QEMU killed halfway) says so and boots fresh on the disk, leaving no mapped file behind. A pause
in place that cannot finish (the state dir unwritable, QEMU killed halfway) says so and saves
nothing, and a link planted in the VM's run dir is never followed."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import signal
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sanbox.host.drivers.qemu import inplace
from sanbox.host.errors import HostError
from sanbox.host.image import Image
from sanbox.host.runtime import HostRuntime, Machine, MachineSpec
from sanbox.host.saved import mapped_memory, memfile, memory
from sanbox.host.saved.memory import PauseError

from .conftest import MakeMachine, immutable

pytestmark = pytest.mark.vm
Run = Callable[..., Any]
COUNTER = (
    "nohup sh -c 'while :; do date +%s%N >> /tmp/ticks; sleep 0.2; done' >/dev/null 2>&1 "
    "& echo $! > /tmp/counter.pid"
)


@pytest.fixture(scope="module")
def pausable(make_machine: MakeMachine) -> Iterator[Machine]:
    yield make_machine(memory_mib=512)


def spec_of(machine: Machine) -> MachineSpec:
    return MachineSpec(computer_id=machine.computer_id, memory_mib=512)


def resume(runtime: HostRuntime, machine: Machine, image: Image, run: Run) -> str:
    resumed, outcome = run(runtime.resume(spec_of(machine), image))
    machine.vm, machine.agent = resumed.vm, resumed.agent
    return str(outcome)


def maps_of(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_the_saved_file_is_mapped_and_the_guest_never_writes_it(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    saved = run(runtime.pause(pausable, spec_of(pausable), image))
    assert resume(runtime, pausable, image, run) == "restored"
    mapped = mapped_memory.mapped_file(pausable.dir.run)
    assert not (pausable.dir.state / memory.MEMORY).exists()  # moved, not copied
    assert str(mapped) in maps_of(pausable.vm.pid)  # QEMU maps it, opened once
    assert not runtime.data_dir.ram_file(pausable.computer_id).exists()  # no RAM file in tmpfs
    # the guest fills 64 MiB of memory: copy-on-write, the saved file stays as it was saved
    run(pausable.agent.exec("head -c 64M /dev/urandom > /tmp/noise && sync"))
    memfile.verify(mapped, saved.memory_bytes, saved.chunks(), runtime.memory_key)


def test_a_resumed_computer_pauses_and_resumes_again(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    agent = pausable.agent
    run(agent.exec(COUNTER))
    run(agent.files.put("/tmp/note.txt", b"written while mapped\n"))
    pid = run(agent.files.read("/tmp/counter.pid")).strip()
    noise = run(agent.exec("sha256sum < /tmp/noise")).stdout  # written while mapped
    mapped = mapped_memory.mapped_file(pausable.dir.run)
    inode = mapped.stat().st_ino
    saved = run(runtime.pause(pausable, spec_of(pausable), image))  # the written pages, in place
    assert not mapped.exists()  # the VM ended: nothing maps it any more
    state_memory = (pausable.dir.state / memory.MEMORY).stat()
    assert state_memory.st_ino == inode and state_memory.st_nlink == 1  # the same file, moved
    assert state_memory.st_uid == 0 and state_memory.st_mode & 0o777 == 0o600  # root's again
    assert saved.memory_allocated > 64 << 20  # /tmp/noise is in it
    for _ in range(2):
        assert resume(runtime, pausable, image, run) == "restored"
        agent = pausable.agent
        assert run(agent.files.read("/tmp/note.txt")) == b"written while mapped\n"
        assert run(agent.exec(["kill", "-0", pid.decode()])).exit_code == 0
        assert run(agent.exec("sha256sum < /tmp/noise")).stdout == noise
        run(agent.files.put("/tmp/note.txt", b"written while mapped\n"))
        run(runtime.pause(pausable, spec_of(pausable), image))
    assert resume(runtime, pausable, image, run) == "restored"


def test_the_mapped_file_may_go_while_the_vm_runs(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    """QEMU opened and mapped the file once: unlinked (a snapshot deleted while its forks run)
    and its pages dropped from the page cache, the guest still reads its memory, and pauses."""
    noise = run(pausable.agent.exec("sha256sum < /tmp/noise")).stdout
    mapped = mapped_memory.mapped_file(pausable.dir.run)
    mapped.unlink()
    Path("/proc/sys/vm/drop_caches").write_text("1")  # clean pages: read again from the file
    assert f"{mapped} (deleted)" in maps_of(pausable.vm.pid)
    assert run(pausable.agent.exec("sha256sum < /tmp/noise")).stdout == noise
    run(runtime.pause(pausable, spec_of(pausable), image))
    assert resume(runtime, pausable, image, run) == "restored"
    assert run(pausable.agent.exec("sha256sum < /tmp/noise")).stdout == noise


def test_a_missing_memory_file_boots_fresh_and_keeps_the_disk(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    run(pausable.agent.files.put("/root/on-disk.txt", b"disk survives\n"))
    run(pausable.agent.exec("sync"))
    run(runtime.pause(pausable, spec_of(pausable), image))
    (pausable.dir.state / memory.MEMORY).unlink()
    assert resume(runtime, pausable, image, run) == "lost (missing)"
    assert run(pausable.agent.files.read("/root/on-disk.txt")) == b"disk survives\n"
    assert run(pausable.agent.exec("test -e /tmp/note.txt")).exit_code == 1  # a fresh boot
    assert not mapped_memory.mapped_file(pausable.dir.run).exists()


def test_corrupt_memory_is_never_mapped(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    """One flipped byte in the saved memory: refused before anything of the state loads (the
    check runs while QEMU starts: that QEMU is killed, never run), fresh boot."""
    run(pausable.agent.files.put("/tmp/held-in-tmpfs.txt", b"x" * 100_000))
    saved = run(runtime.pause(pausable, spec_of(pausable), image))
    offset, length, _ = saved.memory_chunks[len(saved.memory_chunks) // 2]
    with open(pausable.dir.state / memory.MEMORY, "r+b") as f:
        f.seek(int(offset) + int(length) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
    assert resume(runtime, pausable, image, run) == "lost (corrupt)"
    assert run(pausable.agent.files.read("/root/on-disk.txt")) == b"disk survives\n"
    assert run(pausable.agent.exec("test -e /tmp/held-in-tmpfs.txt")).exit_code == 1
    assert not mapped_memory.mapped_file(pausable.dir.run).exists()
    running = subprocess.run(["pgrep", "-f", str(pausable.dir.root)], capture_output=True)
    assert running.stdout.split() == [str(pausable.vm.pid).encode()], "the refused QEMU runs on"


def kill_when_started(pidfile: Path, stop: threading.Event) -> None:
    """SIGKILL the QEMU this test's resume starts, as soon as its pidfile names it."""
    while not stop.wait(0.005):
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
        os.kill(pid, signal.SIGKILL)
        return


def test_qemu_killed_during_restore_boots_fresh_and_keeps_the_disk(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    run(pausable.agent.files.put("/tmp/held-in-tmpfs.txt", b"y"))
    run(runtime.pause(pausable, spec_of(pausable), image))
    stop = threading.Event()
    killer = threading.Thread(target=kill_when_started, args=(pausable.dir.run / "vm.pid", stop))
    killer.start()
    try:
        outcome = resume(runtime, pausable, image, run)
    finally:
        stop.set()
        killer.join()
    assert outcome.startswith("lost (restore failed")
    assert run(pausable.agent.files.read("/root/on-disk.txt")) == b"disk survives\n"
    assert run(pausable.agent.exec("test -e /tmp/held-in-tmpfs.txt")).exit_code == 1
    assert not mapped_memory.mapped_file(pausable.dir.run).exists()
    assert not (pausable.dir.state / memory.MANIFEST).exists()


def test_two_vms_run_from_one_saved_memory_file(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    """`run_saved`, as forks use it: a second VM starts from a snapshot's checked memory file
    (a copy of the resumed first one's): where QEMU maps it read-only (>= 8.2) it maps the file
    itself, root's and unwritable; on QEMU 7.2 `run_saved` refuses the shared file and the VM
    gets a checked copy of its own. Each writes its own memory, neither sees the other's
    writes, and the snapshot's file is unchanged."""
    run(pausable.agent.files.put("/tmp/note.txt", b"before the fork\n"))
    run(pausable.agent.exec("sync"))
    spec = spec_of(pausable)
    run(runtime.pause(pausable, spec, image))
    state = pausable.dir.state
    compat = runtime.compat(spec, image)
    saved = memory.load(state, compat, runtime.memory_key)
    mapped_memory.verify_memory(state, saved, runtime.memory_key)
    snap = runtime.data_dir.root / f"test-snap-{pausable.computer_id}"
    snap.mkdir()
    fork_id = "vmtfork" + pausable.computer_id[3:]
    runtime.created.append(fork_id)  # type: ignore[attr-defined]
    try:
        subprocess.run(
            ["cp", "--sparse=always", str(state / memory.MEMORY), str(snap / memory.MEMORY)],
            check=True,
        )
        shutil.copy(state / memory.VMSTATE, snap / memory.VMSTATE)
        fork_dir = runtime.data_dir.computer(fork_id)
        fork_dir.root.mkdir()
        subprocess.run(
            [
                "cp",
                "--sparse=always",
                str(pausable.dir.disk),
                str(fork_dir.root / pausable.dir.disk.name),
            ],
            check=True,
        )
        assert resume(runtime, pausable, image, run) == "restored"
        fork_spec = MachineSpec(computer_id=fork_id, memory_mib=512)
        hv = run(runtime.hypervisor(image))
        shared = snap / memory.MEMORY
        if hv.capabilities.maps_read_only:
            fork = run(runtime.run_saved(fork_spec, image, snap / memory.VMSTATE, shared))
            mapped = mapped_memory.mapped_file(fork.vm.run_dir)
            assert mapped.stat().st_ino == shared.stat().st_ino
            assert shared.stat().st_uid == 0 and shared.stat().st_mode & 0o222 == 0
        else:
            with pytest.raises(HostError, match="read-only"):
                run(runtime.run_saved(fork_spec, image, snap / memory.VMSTATE, shared))
            assert shared.stat().st_uid == 0  # never given to the VM user
            ram = runtime.data_dir.ram_file(fork_id)
            memory.restore_memory(snap, saved, ram, runtime.memory_key)
            fork = run(runtime.run_saved(fork_spec, image, snap / memory.VMSTATE, None))
            assert str(shared) not in maps_of(fork.vm.pid)
        runtime.booted.append(fork)  # type: ignore[attr-defined]
        for machine, word in ((pausable, b"first\n"), (fork, b"fork\n")):
            assert run(machine.agent.files.read("/tmp/note.txt")) == b"before the fork\n"
            run(machine.agent.files.put("/tmp/note.txt", word))
        assert run(pausable.agent.files.read("/tmp/note.txt")) == b"first\n"
        assert run(fork.agent.files.read("/tmp/note.txt")) == b"fork\n"
        mapped_memory.verify_memory(snap, saved, runtime.memory_key)  # the shared file is unchanged
        run(runtime.destroy(fork_id))
        assert mapped_memory.mapped_file(pausable.dir.run).exists()  # the other VM's own file stays
    finally:
        shutil.rmtree(snap, ignore_errors=True)


def test_a_state_the_hypervisor_cannot_load_is_lost_in_its_own_words(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    """A device state that passes every check of ours but that QEMU refuses (re-sealed here
    under the host's key): the resume says what QEMU said, read before the fallback boot's
    launch starts a new log, and the computer boots fresh on its disk."""
    run(pausable.agent.files.put("/root/on-disk.txt", b"disk survives\n"))
    run(pausable.agent.exec("sync"))
    saved = run(runtime.pause(pausable, spec_of(pausable), image))
    vmstate = pausable.dir.state / memory.VMSTATE
    head = vmstate.read_bytes()[:64]
    config = 8 + 1 + 4 + struct.unpack_from(">I", head, 9)[0]  # the header, the machine type
    vmstate.write_bytes(head[:config] + b"\x04" + b"\xee" * 64)  # a section QEMU cannot read
    fields = dataclasses.asdict(saved)
    fields["vmstate_sha256"] = hashlib.sha256(vmstate.read_bytes()).hexdigest()
    fields["vmstate_bytes"] = vmstate.stat().st_size
    memory.adopt(pausable.dir.state, fields, runtime.memory_key)  # sealed as if it came so
    outcome = resume(runtime, pausable, image, run)
    assert outcome.startswith("lost (restore failed") and "qemu said:" in outcome, outcome
    assert run(pausable.agent.files.read("/root/on-disk.txt")) == b"disk survives\n"


def test_a_link_planted_in_the_run_dir_is_not_followed(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run, tmp_path: Path
) -> None:
    """The run dir is the VM user's: a symlink it puts where its mapped file was is never
    written through (the pause takes the stream's way, and the target is untouched)."""
    run(runtime.pause(pausable, spec_of(pausable), image))
    assert resume(runtime, pausable, image, run) == "restored"
    run(pausable.agent.files.put("/tmp/note.txt", b"planted\n"))
    mapped = mapped_memory.mapped_file(pausable.dir.run)
    moved = mapped.with_name("moved-away")
    victim = tmp_path / "victim"
    victim.write_bytes(b"host file\n")
    os.rename(mapped, moved)  # QEMU maps it by its inode: unaffected
    mapped.symlink_to(victim)
    try:
        run(runtime.pause(pausable, spec_of(pausable), image))
    finally:
        moved.unlink(missing_ok=True)
    assert victim.read_bytes() == b"host file\n"
    assert resume(runtime, pausable, image, run) == "restored"
    assert run(pausable.agent.files.read("/tmp/note.txt")) == b"planted\n"


def test_a_pause_in_place_that_cannot_commit_leaves_it_running_and_its_file_its_own(
    pausable: Machine, runtime: HostRuntime, image: Image, run: Run
) -> None:
    run(pausable.agent.files.put("/tmp/note.txt", b"kept through a failed pause\n"))
    mapped = mapped_memory.mapped_file(pausable.dir.run)
    owner = mapped.stat().st_uid
    assert owner != 0  # a resume's own file
    state = pausable.dir.state
    with immutable(state), pytest.raises(PauseError, match="could not"):
        run(runtime.pause(pausable, spec_of(pausable), image))
    assert pausable.vm.alive() and mapped.stat().st_uid == owner and mapped.stat().st_nlink == 1
    assert run(pausable.agent.files.read("/tmp/note.txt")) == b"kept through a failed pause\n"
    assert not list(state.glob("*.tmp")) and not memory.exists(state)
    inode = mapped.stat().st_ino
    run(runtime.pause(pausable, spec_of(pausable), image))  # then it pauses in place
    assert (state / memory.MEMORY).stat().st_ino == inode
    assert resume(runtime, pausable, image, run) == "restored"
    assert run(pausable.agent.files.read("/tmp/note.txt")) == b"kept through a failed pause\n"


def test_qemu_killed_during_a_pause_in_place_saves_nothing(
    pausable: Machine,
    runtime: HostRuntime,
    image: Image,
    run: Run,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Killed after its device state was saved, before its pages were written: the pause
    fails and no state is left (the last test of the module: its computer is gone)."""
    assert mapped_memory.mapped_file(pausable.dir.run).exists()
    copy = inplace.copy_written

    def killed_first(pid: int, mapping: inplace.Mapping, memory_fd: int) -> list[tuple[int, int]]:
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}/maps").exists() and Path(f"/proc/{pid}/maps").read_text():
            threading.Event().wait(0.01)  # gone: its memory can no longer be read
        return copy(pid, mapping, memory_fd)

    monkeypatch.setattr(inplace, "copy_written", killed_first)
    state = pausable.dir.state
    with pytest.raises(PauseError, match="could not save the VM state"):
        run(runtime.pause(pausable, spec_of(pausable), image))
    assert not pausable.vm.alive()
    assert not memory.exists(state) and not list(state.glob("*.tmp"))

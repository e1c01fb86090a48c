"""Snapshots and forks at the host runtime, on real guests: memory kept across a snapshot, a
disk-only snapshot outliving its computer, forks with their own writes and identities, damaged
snapshots refused with the reason, chains bounded over 20 generations, and failures (a full disk,
a killed QEMU) that leave the source as it was and no snapshot half-listed."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sanbox.host.disk import qcow2
from sanbox.host.disk.layers import MAX_CHAIN
from sanbox.host.errors import HostError
from sanbox.host.image import Image
from sanbox.host.runtime import HostRuntime, Machine, MachineSpec
from sanbox.host.saved import mapped_memory, memory
from sanbox.host.snapshot import SnapshotCorruptError, SnapshotError

from .conftest import MakeMachine, skip_unless_live_saves

pytestmark = pytest.mark.vm
Run = Callable[..., Any]
MEMORY_MIB = 512


def new_id(prefix: str = "vmt") -> str:
    return prefix + secrets.token_hex(4)


def snap_id() -> str:
    return "snp_" + secrets.token_hex(6)


def spec_of(machine: Machine) -> MachineSpec:
    return MachineSpec(computer_id=machine.computer_id, memory_mib=MEMORY_MIB)


def sh(run: Run, machine: Machine, cmd: str) -> str:
    result = run(machine.agent.exec(["sh", "-c", cmd], timeout=120))
    assert result.exit_code == 0, (cmd, result.stdout, result.stderr)
    return str(result.stdout.decode().strip())


@pytest.fixture(scope="module")
def snapshots_made(runtime: HostRuntime, loop: Any, data_dir: Any) -> Iterator[list[str]]:
    """Snapshots the tests took, deleted at the end with the computers; then no layer and no
    snapshot folder may be left behind."""
    made: list[str] = []
    first = len(runtime.created)  # type: ignore[attr-defined]
    yield made
    for sid in made:
        with contextlib.suppress(SnapshotError):
            loop.run(runtime.delete_snapshot(sid))
    for m in list(runtime.booted):  # type: ignore[attr-defined]
        if m.computer_id in runtime.created[first:]:  # type: ignore[attr-defined]
            loop.run(m.agent.close())
    for cid in runtime.created[first:]:  # type: ignore[attr-defined]
        loop.run(runtime.destroy(cid))
    loop.run(runtime.gc_layers())
    assert not list(data_dir.layers.iterdir()), "layers left behind"
    assert not list(data_dir.snapshots.iterdir()), "snapshot folders left behind"


@pytest.fixture
def from_snapshot(
    runtime: HostRuntime, image: Image, run: Run
) -> Callable[..., tuple[Machine, Any]]:
    def make(snapshot_id: str, **kw: Any) -> tuple[Machine, Any]:
        cid = new_id()
        runtime.created.append(cid)  # type: ignore[attr-defined]
        spec = MachineSpec(computer_id=cid, hostname=cid, memory_mib=MEMORY_MIB, **kw)
        machine, outcome = run(runtime.create_from_snapshot(spec, image, snapshot_id))
        runtime.booted.append(machine)  # type: ignore[attr-defined]
        return machine, outcome

    return make


@pytest.fixture
def take(
    runtime: HostRuntime, image: Image, run: Run, snapshots_made: list[str]
) -> Callable[..., tuple[str, Any]]:
    """Snapshot `source` (a running machine; `running=False`: its saved state) under a new id
    that the module's teardown deletes; (the id, the manifest)."""

    def snapshot(source: Machine, memory: bool, running: bool = True) -> tuple[str, Any]:
        sid = snap_id()
        snapshots_made.append(sid)
        vm = source if running else None
        return sid, run(
            runtime.snapshot(sid, source.computer_id, vm, spec_of(source), image, memory)
        )

    return snapshot


def test_memory_snapshot_keeps_process_and_tmpfs(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    run: Run,
    from_snapshot: Callable[..., tuple[Machine, Any]],
    take: Callable[..., tuple[str, Any]],
) -> None:
    source = make_machine(memory_mib=MEMORY_MIB)
    sh(run, source, "nohup sh -c 'while :; do sleep 0.2; done' >/dev/null 2>&1 & echo $! > /run/p")
    sh(run, source, "echo kept-in-tmpfs > /run/note; echo on-disk > /root/disk-note; sync")
    pid = sh(run, source, "cat /run/p")
    sid, snap = take(source, True)
    assert snap.memory and snap.size_bytes > 0 and snap.paused_seconds < 30
    assert sh(run, source, "cat /run/note") == "kept-in-tmpfs"  # the source runs on
    sh(run, source, "echo after > /root/after-snapshot")
    copy, outcome = from_snapshot(sid)
    assert outcome is not None and outcome.restored, outcome
    assert sh(run, copy, "cat /run/note; cat /root/disk-note") == "kept-in-tmpfs\non-disk"
    assert sh(run, copy, f"kill -0 {pid} && echo alive") == "alive"
    assert sh(run, copy, "test -e /root/after-snapshot || echo absent") == "absent"
    assert sh(run, copy, "hostname") == copy.computer_id
    assert sid in [s.id for s in runtime.snapshots.complete()]


def test_disk_snapshot_survives_its_source(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    run: Run,
    from_snapshot: Callable[..., tuple[Machine, Any]],
    snapshots_made: list[str],
    take: Callable[..., tuple[str, Any]],
) -> None:
    source = make_machine(memory_mib=MEMORY_MIB)
    sh(run, source, "echo from-source > /root/kept; sync")
    sid, snap = take(source, False)
    assert not snap.memory
    sh(run, source, "echo later > /root/kept; sync")  # the source writes on its new overlay
    run(source.agent.close())
    run(runtime.destroy(source.computer_id))
    run(runtime.gc_layers())
    copy, outcome = from_snapshot(sid)
    assert outcome is None  # booted on the disk
    assert sh(run, copy, "cat /root/kept") == "from-source"
    # a computer whose disk backs another: deleting it leaves the other working
    sid2, _ = take(copy, False)
    grandchild, _ = from_snapshot(sid2)
    run(runtime.delete_snapshot(sid2))
    snapshots_made.remove(sid2)
    run(copy.agent.close())
    run(runtime.destroy(copy.computer_id))
    run(runtime.gc_layers())
    assert sh(run, grandchild, "cat /root/kept; echo more > /root/x; sync; cat /root/x") == (
        "from-source\nmore"
    )


def test_corrupted_snapshot_is_refused_with_reason(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    image: Image,
    run: Run,
    from_snapshot: Callable[..., tuple[Machine, Any]],
    data_dir: Any,
    take: Callable[..., tuple[str, Any]],
) -> None:
    source = make_machine(memory_mib=MEMORY_MIB)
    sid, snap = take(source, True)
    layer = runtime.snapshots.layers.path(snap.layer)
    with open(layer, "r+b") as f:  # a flipped byte in the disk layer
        f.seek(layer.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(SnapshotCorruptError, match="does not match its digest") as err:
        from_snapshot(sid)
    assert err.value.reason == "corrupt"
    with open(layer, "r+b") as f:  # mended: the memory file damaged instead
        f.seek(layer.stat().st_size // 2)
        f.write(byte)
    memfile = data_dir.snapshot(sid) / "memory" / "memory"
    with open(memfile, "r+b") as f:
        f.seek(4096 * 10)
        page = f.read(1)
        f.seek(4096 * 10)
        f.write(bytes([page[0] ^ 0x01]))
    with pytest.raises(SnapshotCorruptError, match="memory"):
        from_snapshot(sid)
    manifest = data_dir.snapshot(sid) / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"memory": true', '"memory": false'))
    with pytest.raises(SnapshotCorruptError, match="manifest was changed"):
        from_snapshot(sid)
    assert sid not in [s.id for s in runtime.snapshots.complete()]  # never listed damaged
    refused = runtime.created[-3:]  # type: ignore[attr-defined]
    assert not [c for c in refused if (data_dir.computers / c).exists()]  # nothing half-made
    assert not [c for c in refused if data_dir.ram_file(c).exists()]  # (a copy's RAM file)
    made = runtime.machines.network.namespaces() if runtime.machines.network else []
    assert not [c for c in refused if any(ns.endswith(c) for ns in made)]


def chain_length(disk: Path) -> int:
    return len(qcow2.chain(disk)) - 1  # the image not counted


def test_three_forks_share_the_past_but_not_identity_or_future(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    image: Image,
    run: Run,
    snapshots_made: list[str],
) -> None:
    parent = make_machine(memory_mib=MEMORY_MIB)
    sh(run, parent, "nohup sh -c 'while :; do sleep 0.2; done' >/dev/null 2>&1 & echo $! > /run/p")
    sh(run, parent, "echo parent > /root/parent-file; echo parent-tmp > /run/parent-tmp")
    parent_key = run(parent.agent.ssh.host_key())
    pid = sh(run, parent, "cat /run/p")
    specs = []
    for _ in range(3):
        cid = new_id("frk")
        runtime.created.append(cid)  # type: ignore[attr-defined]
        specs.append(MachineSpec(computer_id=cid, hostname=cid, memory_mib=MEMORY_MIB))
    forks = run(runtime.fork(parent, spec_of(parent), image, specs), 600)
    runtime.booted.extend(forks)  # type: ignore[attr-defined]
    assert [f.computer_id for f in forks] == [s.computer_id for s in specs]
    assert sh(run, parent, "cat /run/parent-tmp") == "parent-tmp"  # the source runs on
    seen = []
    for fork in forks:
        out = sh(run, fork, f"cat /root/parent-file /run/parent-tmp; kill -0 {pid} && echo alive")
        assert out == "parent\nparent-tmp\nalive"
        sh(run, fork, f"echo {fork.computer_id} > /root/mine-{fork.computer_id}; sync")
    for fork in forks:
        others = [f.computer_id for f in forks if f is not fork]
        listing = sh(run, fork, "ls /root")
        assert f"mine-{fork.computer_id}" in listing
        assert not any(f"mine-{o}" in listing for o in others), listing
        seen.append(
            {
                "hostname": sh(run, fork, "hostname"),
                "machine_id": sh(run, fork, "cat /etc/machine-id"),
                "ssh": run(fork.agent.ssh.host_key()),
                "urandom": sh(run, fork, "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'"),
            }
        )
    assert [s["hostname"] for s in seen] == [f.computer_id for f in forks]
    for key in ("machine_id", "ssh", "urandom"):
        assert len({s[key] for s in seen}) == 3, (key, seen)
    assert parent_key not in {s["ssh"] for s in seen}
    assert not any("mine-" in x for x in sh(run, parent, "ls /root").split())
    assert not runtime.snapshots.complete() or all(
        not s.id.startswith("snp_fork") for s in runtime.snapshots.complete()
    )  # the fork's own snapshot is gone; its layers stay under the forks' disks


def test_twenty_generations_stay_bounded_and_boot(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    image: Image,
    run: Run,
    snapshots_made: list[str],
) -> None:
    current = make_machine(memory_mib=MEMORY_MIB)
    sh(run, current, "echo generation-0 > /root/origin; sync")
    depths = []
    for generation in range(1, 21):
        cid = new_id("gen")
        runtime.created.append(cid)  # type: ignore[attr-defined]
        spec = MachineSpec(computer_id=cid, hostname=cid, memory_mib=MEMORY_MIB)
        (child,) = run(runtime.fork(current, spec_of(current), image, [spec]), 600)
        runtime.booted.append(child)  # type: ignore[attr-defined]
        sh(run, child, f"echo {generation} >> /root/generations; sync")
        depths.append(chain_length(child.dir.disk))
        depths.append(chain_length(current.dir.disk))
        run(current.agent.close())
        run(runtime.destroy(current.computer_id))  # its disk backs the child: the child goes on
        run(runtime.gc_layers())
        current = child
    assert max(depths) <= MAX_CHAIN, depths
    assert len(list(runtime.data_dir.layers.glob("*.qcow2"))) <= 2 * MAX_CHAIN
    run(current.agent.close())
    run(runtime.shutdown(current, timeout=30))
    booted = run(
        runtime.start(MachineSpec(computer_id=current.computer_id, memory_mib=MEMORY_MIB), image)
    )
    runtime.booted.append(booted)  # type: ignore[attr-defined]
    assert sh(run, booted, "cat /root/origin") == "generation-0"
    assert sh(run, booted, "tr '\\n' ' ' < /root/generations").split() == [
        str(g) for g in range(1, 21)
    ]
    assert chain_length(booted.dir.disk) <= MAX_CHAIN


@pytest.mark.usefixtures("stopped")
def test_a_full_disk_during_a_snapshot_leaves_the_source_running(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    image: Image,
    run: Run,
    snapshots_made: list[str],
    data_dir: Any,
) -> None:
    source = make_machine(memory_mib=MEMORY_MIB)
    sh(run, source, "head -c 8M /dev/urandom > /run/fill; echo before > /root/f; sync")
    runtime.snapshots.ensure()
    subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "size=1m,mode=0700",
            "sanbox-enospc",
            str(data_dir.snapshots),
        ],
        check=True,
    )
    try:
        sid = snap_id()
        with pytest.raises(SnapshotError, match="No space left"):
            run(runtime.snapshot(sid, source.computer_id, source, spec_of(source), image, True))
        assert not list(data_dir.snapshots.iterdir()), "a half-written snapshot was left"
    finally:
        subprocess.run(["umount", str(data_dir.snapshots)], check=True)
    assert sid not in [s.id for s in runtime.snapshots.complete()]
    assert sh(run, source, "cat /root/f; echo after > /root/f; sync; cat /root/f") == (
        "before\nafter"
    )


def stream_growing(runtime: HostRuntime, sid: str) -> bool:
    """Whether the snapshot's RAM stream has bytes in it: a live save is under way."""
    tmp = runtime.snapshots.tmp_dir(sid)
    return any(f.stat().st_size > 0 for f in tmp.glob("*/*.tmp")) if tmp.is_dir() else False


async def when_saving(runtime: HostRuntime, sid: str, task: asyncio.Future[Any]) -> None:
    """Wait until the live save of snapshot `sid` writes its stream (its task still running)."""
    deadline = time.monotonic() + 120
    while not stream_growing(runtime, sid):
        assert not task.done(), "the snapshot ended before its stream was seen"
        assert time.monotonic() < deadline, "no stream was written"
        await asyncio.sleep(0.01)


@pytest.fixture
def live(runtime: HostRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    """This host saves a running guest's memory as it runs (SANBOX_SNAPSHOT=live)."""
    skip_unless_live_saves(runtime.data_dir)
    m = runtime.machines
    monkeypatch.setattr(m, "settings", dataclasses.replace(m.settings, snapshot="live"))


@pytest.fixture
def stopped(runtime: HostRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    """This host stops the vCPUs while a running guest's memory is saved (SANBOX_SNAPSHOT=
    stopped; by default a hypervisor that can save live does: its faults are tested apart)."""
    m = runtime.machines
    monkeypatch.setattr(m, "settings", dataclasses.replace(m.settings, snapshot="stopped"))


@pytest.mark.usefixtures("live")
def test_a_live_snapshot_lets_the_guest_run_while_its_memory_is_saved(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    image: Image,
    run: Run,
    snapshots_made: list[str],
    from_snapshot: Callable[..., tuple[Machine, Any]],
) -> None:
    """The guest runs a command while its memory is being saved, and the snapshot still holds
    one instant, after that command: its restore has the command's file, the memory as it was
    and the disk as it was."""
    source = make_machine(memory_mib=MEMORY_MIB)
    ballast = "head -c 200M /dev/urandom > /dev/shm/ballast; sha256sum < /dev/shm/ballast"
    digest = sh(run, source, f"{ballast}; echo kept > /root/f; sync")
    sid = snap_id()
    snapshots_made.append(sid)

    async def snapshot_and_exec() -> Any:
        task = asyncio.ensure_future(
            runtime.snapshot(sid, source.computer_id, source, spec_of(source), image, True)
        )
        await when_saving(runtime, sid, task)
        result = await source.agent.exec(["sh", "-c", "echo during > /root/g"], timeout=120)
        assert result.exit_code == 0
        return await task

    snap = run(snapshot_and_exec())
    assert snap.memory
    kid, outcome = from_snapshot(sid)
    assert outcome.restored, outcome  # else its console's last lines say why
    restored = sh(run, kid, "cat /root/f /root/g; sha256sum < /dev/shm/ballast")
    assert restored.split("\n") == ["kept", "during", digest]


@pytest.mark.usefixtures("live")
def test_a_killed_hypervisor_mid_live_save_leaves_no_snapshot_and_a_good_disk(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    image: Image,
    run: Run,
    snapshots_made: list[str],
) -> None:
    source = make_machine(memory_mib=MEMORY_MIB)
    sh(run, source, "head -c 200M /dev/urandom > /dev/shm/ballast; echo before > /root/f; sync")
    sid = snap_id()

    async def kill_while_saving() -> None:
        task = asyncio.ensure_future(
            runtime.snapshot(sid, source.computer_id, source, spec_of(source), image, True)
        )
        await when_saving(runtime, sid, task)
        os.kill(source.vm.pid, signal.SIGKILL)
        await task

    with pytest.raises((SnapshotError, HostError, OSError)):
        run(kill_while_saving())
    assert sid not in [s.id for s in runtime.snapshots.complete()]
    assert not list(runtime.data_dir.snapshots.glob(".tmp-*")), "a half-written snapshot"
    run(runtime.kill(source.computer_id))
    booted = run(runtime.start(spec_of(source), image))
    runtime.booted.append(booted)  # type: ignore[attr-defined]
    assert sh(run, booted, "cat /root/f") == "before"


@pytest.mark.usefixtures("stopped")
def test_a_killed_hypervisor_mid_snapshot_leaves_no_snapshot_and_a_good_disk(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    image: Image,
    run: Run,
    snapshots_made: list[str],
    loop: Any,
) -> None:
    source = make_machine(memory_mib=MEMORY_MIB)
    sh(run, source, "echo before > /root/f; sync")
    sid = snap_id()

    async def snapshot_and_kill() -> None:
        task = asyncio.ensure_future(
            runtime.snapshot(sid, source.computer_id, source, spec_of(source), image, True)
        )
        await asyncio.sleep(0)  # the snapshot has started: its VM is killed under it
        os.kill(source.vm.pid, signal.SIGKILL)
        await task

    with pytest.raises((SnapshotError, HostError, OSError)):
        run(snapshot_and_kill())
    assert sid not in [s.id for s in runtime.snapshots.complete()]
    assert not runtime.data_dir.snapshot(sid).exists()
    assert not list(runtime.data_dir.snapshots.glob(".tmp-*"))
    run(runtime.kill(source.computer_id))
    booted = run(runtime.start(spec_of(source), image))
    runtime.booted.append(booted)  # type: ignore[attr-defined]
    assert sh(run, booted, "cat /root/f") == "before"


def test_a_paused_computers_snapshot_keeps_its_memory_and_its_own_resume(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    image: Image,
    run: Run,
    from_snapshot: Callable[..., tuple[Machine, Any]],
    take: Callable[..., tuple[str, Any]],
) -> None:
    source = make_machine(memory_mib=MEMORY_MIB)
    sh(run, source, "echo paused-tmp > /run/note")
    run(runtime.pause(source, spec_of(source), image))
    sid, snap = take(source, True, running=False)
    assert snap.memory and snap.paused_seconds == 0
    copy, outcome = from_snapshot(sid)
    assert outcome is not None and outcome.restored, outcome
    assert sh(run, copy, "cat /run/note") == "paused-tmp"
    resumed, own = run(runtime.resume(spec_of(source), image))
    source.vm, source.agent = resumed.vm, resumed.agent
    assert own.restored and sh(run, source, "cat /run/note") == "paused-tmp"


def test_a_resumed_computers_snapshot_saves_what_it_wrote_beside_its_saved_memory(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    image: Image,
    run: Run,
    from_snapshot: Callable[..., tuple[Machine, Any]],
    take: Callable[..., tuple[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A computer resumed from its own saved memory: its snapshot saves, vCPUs stopped, the
    pages written since the resume, and copies the rest from its mapped file (left as it was)
    once it runs on. A copy has both; the source pauses and resumes with both too."""
    source = make_machine(memory_mib=MEMORY_MIB)
    sh(run, source, "echo before-the-pause > /run/note")
    run(runtime.pause(source, spec_of(source), image))
    resumed, own = run(runtime.resume(spec_of(source), image))
    source.vm, source.agent = resumed.vm, resumed.agent
    assert own.restored
    sh(run, source, "echo after-the-resume > /run/later; head -c 32M /dev/urandom > /run/noise")
    noise = sh(run, source, "sha256sum < /run/noise")
    mapped = mapped_memory.mapped_file(source.dir.run)
    before = mapped.stat()
    beside: list[list[tuple[int, int]]] = []
    write_beside = memory.write_beside

    def seen(*args: Any) -> Any:
        beside.append(args[3])  # the byte ranges written while the vCPUs were stopped
        return write_beside(*args)

    monkeypatch.setattr(memory, "write_beside", seen)
    sid, snap = take(source, True)
    assert len(beside) == 1 and sum(end - start for start, end in beside[0]) >= 32 << 20
    assert snap.memory and snap.paused_seconds < 30
    after = mapped.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_nlink) == (
        before.st_ino,
        before.st_mtime_ns,
        1,
    )  # the source's own file is not written by its snapshot
    copy, outcome = from_snapshot(sid)
    assert outcome is not None and outcome.restored, outcome
    for machine in (copy, source):
        assert sh(run, machine, "cat /run/note /run/later") == "before-the-pause\nafter-the-resume"
        assert sh(run, machine, "sha256sum < /run/noise") == noise
    run(runtime.pause(source, spec_of(source), image))  # in place, after its snapshot
    resumed, own = run(runtime.resume(spec_of(source), image))
    source.vm, source.agent = resumed.vm, resumed.agent
    assert own.restored and sh(run, source, "cat /run/later") == "after-the-resume"
    assert sh(run, source, "sha256sum < /run/noise") == noise


def test_a_frozen_root_filesystem_holds_writes_and_thaws_by_itself(
    make_machine: MakeMachine, run: Run, snapshots_made: list[str]
) -> None:
    """A host that freezes the guest's disk and then vanishes must not hang the guest."""
    guest = make_machine(memory_mib=MEMORY_MIB)
    run(guest.agent.fs_freeze(3.0))
    started = time.monotonic()
    sh(run, guest, "echo held > /root/held; sync")  # blocks until the guest thaws itself
    assert time.monotonic() - started >= 2.0
    assert not run(guest.agent.fs_thaw())  # thawed already
    run(guest.agent.fs_freeze(30.0))
    assert run(guest.agent.fs_thaw())
    assert sh(run, guest, "echo free > /root/free; sync; cat /root/held /root/free") == (
        "held\nfree"
    )


def test_a_running_raw_disk_computer_moves_onto_an_overlay_losing_nothing(
    make_machine: MakeMachine,
    runtime: HostRuntime,
    run: Run,
    from_snapshot: Callable[..., tuple[Machine, Any]],
    take: Callable[..., tuple[str, Any]],
) -> None:
    """Computers made before overlays, or on a reflink filesystem, have raw disks."""
    was = runtime.disks._reflink
    runtime.disks._reflink = True  # a reflink host's disks are raw (here: a sparse copy)
    try:
        source = make_machine(memory_mib=MEMORY_MIB)
    finally:
        runtime.disks._reflink = was
    assert source.dir.disk.suffix == ".raw"
    sh(run, source, "echo raw-before > /root/f; sync")
    sid, _ = take(source, True)
    assert source.dir.disk.suffix == ".qcow2"  # the raw file is now the layer under it
    assert sh(run, source, "cat /root/f; echo raw-after > /root/f; sync; cat /root/f") == (
        "raw-before\nraw-after"
    )
    copy, outcome = from_snapshot(sid)
    assert outcome is not None and outcome.restored
    assert sh(run, copy, "cat /root/f") == "raw-before"

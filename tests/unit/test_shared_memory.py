"""A memory image many VMs start from (a snapshot's: forks, restores, ready snapshots, pool
members) is never a VM's to write, truncate or re-own: QEMU >= 8.2 maps it from a read-only
descriptor (`readonly=on,rom=off`), QEMU 7.2 (whose `readonly=on` makes the guest's RAM a ROM and
which otherwise opens the file read-write) gets a checked copy of its own instead."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from sanbox.host.drivers import VmUser
from sanbox.host.drivers.confine import (
    SHARED_MEMORY_MODE,
    ConfinementError,
    _set_access,
    memory_access,
)
from sanbox.host.drivers.qemu import argv as qemu
from sanbox.host.drivers.qemu import launch
from sanbox.host.machines import restore, suspend
from sanbox.host.saved import mapped_memory, memfile, memory
from sanbox.host.snapshot.errors import SnapshotCorruptError

from .test_qemu_argv import spec
from .test_saved_memory import COMPAT, KEY, saved_state

pytestmark = pytest.mark.unit
USER = VmUser("sanbox-vm:2046820353", 2046820353, 995)
RUN = Path("/d/computers/cmp_a/run")


def backend(argv: list[str]) -> str:
    return argv[argv.index("-object") + 1]


def test_a_shared_image_is_opened_read_only_and_stays_ram_to_the_guest() -> None:
    image = spec(memory_file=RUN / "memory.mapped", memory_readonly=True, restore=True)
    argv = qemu.qemu_argv(image, "kvm", 2000.0)
    assert backend(argv) == (
        f"memory-backend-file,id=ram,size=768M,mem-path={RUN}/memory.mapped,"
        "share=off,readonly=on,rom=off"
    )


def test_the_vms_own_saved_memory_and_its_ram_file_are_not_read_only() -> None:
    own = qemu.qemu_argv(spec(memory_file=RUN / "memory.mapped", memory_private=True), "kvm", 1.0)
    assert backend(own).endswith(",share=off") and "readonly" not in backend(own)
    ram = qemu.qemu_argv(spec(memory_file=Path("/dev/shm/sb.ram")), "kvm", 1.0)
    assert backend(ram).endswith(",share=on") and "readonly" not in backend(ram)


@pytest.mark.parametrize(
    ("banner", "version", "maps"),
    [
        ("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)", (7, 2), False),
        ("QEMU emulator version 8.1.5", (8, 1), False),
        ("QEMU emulator version 8.2.0 (Debian 1:8.2.0+ds-1~bpo12+1)", (8, 2), True),
        ("QEMU emulator version 10.0.3", (10, 0), True),
        ("unknown", (0, 0), False),
    ],
)
def test_read_only_mapping_needs_qemu_8_2(
    banner: str, version: tuple[int, int], maps: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert qemu.version_of(banner) == version
    monkeypatch.setattr(launch, "qemu_version", lambda: banner)
    assert launch.QemuHypervisor("kvm").capabilities.maps_read_only is maps


def test_a_shared_image_stays_roots_and_no_one_may_write_it() -> None:
    image = spec(memory_file=RUN / "memory.mapped", memory_readonly=True)
    uid, gid, mode = memory_access(image, USER, links=3)
    assert (uid, gid, mode) == (0, USER.gid, SHARED_MEMORY_MODE)
    assert mode & 0o222 == 0 and mode & 0o007 == 0  # no write bit; others not even read


def test_a_vms_own_ram_file_is_its_own() -> None:
    own = spec(memory_file=RUN / "memory.mapped", memory_private=True)
    assert memory_access(own, USER, links=1) == (USER.uid, USER.gid, 0o600)


def test_a_memory_file_with_other_names_is_never_made_one_vms(tmp_path: Path) -> None:
    """Before: a fork's launch chowned the snapshot's memory inode (hard-linked into its run dir)
    to its own uid, and QEMU opened it read-write. Now such a file is refused."""
    shared = tmp_path / "snapshot-memory"
    shared.write_bytes(b"\x01" * 4096)
    os.chmod(shared, 0o400)
    linked = tmp_path / "memory.mapped"
    os.link(shared, linked)
    before = shared.stat()
    asked = spec(memory_file=linked, memory_private=True)
    with pytest.raises(ConfinementError, match="2 names"):
        _set_access(linked, False, lambda n: memory_access(asked, USER, n))
    after = shared.stat()
    assert (after.st_uid, after.st_gid, after.st_mode) == (
        before.st_uid,
        before.st_gid,
        before.st_mode,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to root needs root")
def test_a_shared_image_is_given_to_root_with_read_for_the_group(tmp_path: Path) -> None:
    shared = tmp_path / "memory.mapped"
    shared.write_bytes(b"\x01" * 4096)
    os.chown(shared, USER.uid, USER.gid)  # as a launch of the former way left it
    os.link(shared, tmp_path / "snapshot-memory")
    image = spec(memory_file=shared, memory_readonly=True)
    _set_access(shared, False, lambda n: memory_access(image, USER, n))
    st = shared.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, USER.gid, 0o440)


# -- which way a restore from a snapshot takes -----------------------------------------------


@dataclass
class FakeMachines:
    maps: bool
    root: Path
    memory_key: bytes = KEY
    started: list[Path | None] = field(default_factory=list)  # VM processes launched
    loaded: list[Path | None] = field(default_factory=list)  # states loaded: the guest ran
    fail: bool = False

    @property
    def data_dir(self) -> SimpleNamespace:
        return SimpleNamespace(
            computer=lambda cid: SimpleNamespace(root=self.root / cid, run=self.root / cid / "run"),
            ram_file=lambda cid: self.root / f"{cid}.ram",
        )

    async def choose(self, image: object) -> SimpleNamespace:
        caps = SimpleNamespace(maps_read_only=self.maps)
        return SimpleNamespace(name="qemu", capabilities=caps)

    async def run_saved(
        self,
        spec: object,
        image: object,
        vmstate: Path,
        memory_file: Path | None,
        checking: asyncio.Future[None] | None = None,
        *,
        set_clock: bool = True,
    ) -> str:
        """As `Machines.run_saved`: the VM process starts, `checking` (a copy into the RAM
        file) is awaited, and only then the state loads; a launch that fails awaits it too."""
        self.started.append(memory_file)
        if checking is not None:
            await checking
        if self.fail:
            raise OSError("QEMU said no")
        self.loaded.append(memory_file)
        return "machine"


def restore_with(
    rt: FakeMachines, state: Path, forks: int = 0
) -> tuple[object, memory.MemoryOutcome]:
    """One restore (`forks` 0) or that many forks' restores of one snapshot side by side, which
    share one check of its memory where it lies (as `fork` starts it: `_memory_once`); the
    first one's outcome (or the failure of any)."""
    snaps = SimpleNamespace(memory_dir=lambda _id: state)
    snap = SimpleNamespace(id="snp_a")

    async def restored(
        name: str, checked: asyncio.Future[Path] | None
    ) -> tuple[object, memory.MemoryOutcome]:
        spec_ = SimpleNamespace(computer_id=name)
        copy = None
        if not rt.maps:  # as create_from_snapshot: the copy started first, filled meanwhile
            saved = memory.load(state, COMPAT, rt.memory_key)
            copy = await restore._start_copy(rt, snaps, snap, spec_, saved, checked)  # type: ignore[arg-type]
        return await restore._restore(rt, snaps, snap, spec_, None, COMPAT, copy, checked)  # type: ignore[arg-type]

    async def all_of() -> tuple[object, memory.MemoryOutcome]:
        if not forks:
            return await restored("cmpa", None)
        checked = asyncio.ensure_future(
            asyncio.to_thread(restore._check_memory, snaps, snap, COMPAT, rt.memory_key)  # type: ignore[arg-type]
        )
        names = ["cmpa"] + [f"cmp{i}" for i in range(1, forks)]
        made = await asyncio.gather(*(restored(n, checked) for n in names), return_exceptions=True)
        await asyncio.wait([checked])  # as fork: its thread has ended
        for one in made:  # as fork: every restore ended (its own clean-up run), then the first
            if isinstance(one, BaseException):  # failure raised
                raise one
        return made[0]  # type: ignore[return-value]

    return asyncio.run(all_of())


def test_on_qemu_7_2_each_vm_gets_a_checked_copy_and_the_image_is_untouched(
    tmp_path: Path,
) -> None:
    state, _ = saved_state(tmp_path)
    image = state / memory.MEMORY
    os.chmod(image, 0o400)
    before = image.stat()
    rt = FakeMachines(maps=False, root=tmp_path)
    machine, outcome = restore_with(rt, state)
    assert (machine, outcome.restored) == ("machine", True)
    assert rt.loaded == [None]  # QEMU is not handed the image: RAM is in its own file
    ram = tmp_path / "cmpa.ram"
    assert ram.read_bytes() == image.read_bytes()
    assert ram.stat().st_ino != before.st_ino
    assert not mapped_memory.mapped_file(tmp_path / "cmpa" / "run").exists()
    after = image.stat()
    assert (after.st_uid, after.st_mode, after.st_nlink) == (
        before.st_uid,
        before.st_mode,
        before.st_nlink,
    )


def test_on_qemu_8_2_the_image_itself_is_mapped(tmp_path: Path) -> None:
    """Checked where it lies and handed to run_saved as it is: run_saved links it read-only in
    the VM's run dir (a VM's own file with two names is refused there, as QEMU 10 showed)."""
    state, _ = saved_state(tmp_path)
    rt = FakeMachines(maps=True, root=tmp_path)
    machine, outcome = restore_with(rt, state)
    assert outcome.restored and rt.started == [state / memory.MEMORY]  # no copy
    assert not mapped_memory.mapped_file(tmp_path / "cmpa" / "run").exists()  # run_saved's to make
    assert not (tmp_path / "cmpa.ram").exists()


@pytest.fixture
def digests(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many chunks were digested (checked), counted as they are."""
    counted: list[int] = []
    real = memfile._digest

    def digest(key: bytes, data: memoryview) -> str:
        counted.append(len(data))
        return real(key, data)

    monkeypatch.setattr(memfile, "_digest", digest)
    return counted


@pytest.mark.parametrize("maps", [False, True], ids=["copied (7.2)", "mapped (8.2)"])
def test_forks_check_the_image_once_between_them(
    tmp_path: Path, digests: list[int], maps: bool
) -> None:
    """N forks of one snapshot: `fork` checks its memory once where it lies (`_memory_once`),
    as their VMs start; mapped, each maps the file checked; copied, each copy is made from it
    without a digest of its own. A restore alone checks it as it maps or copies it."""
    state, _ = saved_state(tmp_path)
    digests.clear()  # (the save's own)
    rt = FakeMachines(maps=maps, root=tmp_path)
    _, outcome = restore_with(rt, state)
    assert outcome.restored
    once = len(digests)
    assert once > 0
    digests.clear()
    _, outcome = restore_with(rt, state, forks=3)
    assert outcome.restored and len(digests) == once  # not three times
    assert len(rt.loaded) == 4
    if not maps:
        for name in ("cmpa", "cmp1", "cmp2"):
            assert (tmp_path / f"{name}.ram").read_bytes() == (state / memory.MEMORY).read_bytes()


@pytest.mark.parametrize("maps", [False, True], ids=["copied (7.2)", "mapped (8.2)"])
def test_a_fault_the_forks_shared_check_finds_refuses_every_fork(
    tmp_path: Path, maps: bool
) -> None:
    """Their VMs start as the check runs; none loads its state, no copy is left."""
    state, _ = saved_state(tmp_path)
    with open(state / memory.MEMORY, "r+b") as f:
        f.write(b"\x09")  # a recorded chunk
    rt = FakeMachines(maps=maps, root=tmp_path)
    with pytest.raises(SnapshotCorruptError):
        restore_with(rt, state, forks=3)
    assert rt.loaded == [] and not list(tmp_path.glob("*.ram"))


def test_on_qemu_8_2_a_failed_start_leaves_the_image(tmp_path: Path) -> None:
    state, _ = saved_state(tmp_path)
    rt = FakeMachines(maps=True, root=tmp_path, fail=True)
    machine, outcome = restore_with(rt, state)
    assert machine is None and not outcome.restored
    assert (state / memory.MEMORY).exists()  # the snapshot's own file, never unlinked


@pytest.mark.parametrize("maps", [False, True], ids=["copied (7.2)", "mapped (8.2)"])
def test_a_changed_image_is_refused_before_any_state_loads(tmp_path: Path, maps: bool) -> None:
    """Mapped, the image is checked before any VM starts; copied, the copy (checked chunk by
    chunk) runs while the VM process starts, which is stopped before its state loads."""
    state, _ = saved_state(tmp_path)
    with open(state / memory.MEMORY, "r+b") as f:
        f.write(b"\x09")  # a recorded chunk
    rt = FakeMachines(maps=maps, root=tmp_path)
    with pytest.raises(SnapshotCorruptError):
        restore_with(rt, state)
    assert rt.started == ([] if maps else [None]) and rt.loaded == []
    assert not (tmp_path / "cmpa.ram").exists()


def test_a_failed_start_leaves_no_copy(tmp_path: Path) -> None:
    state, _ = saved_state(tmp_path)
    rt = FakeMachines(maps=False, root=tmp_path, fail=True)
    machine, outcome = restore_with(rt, state)
    assert machine is None and not outcome.restored and "QEMU said no" in str(outcome.reason)
    assert not (tmp_path / "cmpa.ram").exists() and (state / memory.MEMORY).exists()


def test_a_damaged_disk_layer_found_while_the_copy_runs_leaves_no_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On QEMU 7.2 the copy starts before the snapshot's disk layers are checked: a layer that
    fails its check refuses the restore before any VM starts, the copy's thread ended and its
    file gone."""
    state, _ = saved_state(tmp_path)
    rt = FakeMachines(maps=False, root=tmp_path)
    monkeypatch.setattr(suspend, "compat", lambda *_: COMPAT)
    snap = SimpleNamespace(id="snp_a", image="img", memory=True)

    def damaged(snap: SimpleNamespace) -> None:
        raise SnapshotCorruptError(snap.id, "corrupt", "a layer does not match its digest")

    snaps = SimpleNamespace(
        load=lambda _id: snap,
        memory_dir=lambda _id: state,
        saved_memory=lambda _snap, compat: memory.load(state, compat, KEY),
        verify_disk=damaged,
    )
    image, spec_ = SimpleNamespace(build_id="img"), SimpleNamespace(computer_id="cmpa")
    with pytest.raises(SnapshotCorruptError, match="layer"):
        asyncio.run(restore.create_from_snapshot(rt, snaps, spec_, image, "snp_a"))  # type: ignore[arg-type]
    assert rt.started == [] and not (tmp_path / "cmpa.ram").exists()
    assert not (tmp_path / "cmpa").exists()

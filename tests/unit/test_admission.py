"""Admission arithmetic: a computer is refused before anything is made when its RAM would not fit
in the shared-memory filesystem or its disk on the data filesystem, counting what running guests'
RAM files and existing sparse disks may still grow by."""

from pathlib import Path

import pytest

from sanbox.control import capacity as capacity_module
from sanbox.control.capacity import Capacity, admit
from sanbox.control.errors import InsufficientStorageError
from sanbox.fleet.link.room import HostRoom
from sanbox.host.data import space
from sanbox.host.data.layout import DataDir
from sanbox.host.data.space import Room
from sanbox.host.door import HostFullError
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime

pytestmark = pytest.mark.unit

MIB = 1024**2
GIB = 1024**3
SHM = Path("/dev/shm")
DATA = Path("/var/lib/sanbox")


@pytest.mark.parametrize(
    ("memory_mib", "shm_free_mib", "shm_promised_mib", "refused"),
    [
        (512, 4096, 0, False),
        (512, 512, 0, False),  # exactly fits
        (512, 511, 0, True),
        (512, 2048, 1600, True),  # free now, but running guests' RAM files will grow into it
        (512, 2048, 1536, False),
    ],
)
def test_guest_ram_must_fit_in_what_running_guests_leave(
    memory_mib: int, shm_free_mib: int, shm_promised_mib: int, refused: bool
) -> None:
    ram = Room(SHM, shm_free_mib * MIB, shm_promised_mib * MIB)
    if not refused:
        admit(memory_mib * MIB, ram)
        return
    with pytest.raises(InsufficientStorageError) as caught:
        admit(memory_mib * MIB, ram)
    assert (caught.value.code, caught.value.status) == ("insufficient_memory", 507)
    assert "/dev/shm" in caught.value.message


@pytest.mark.parametrize(
    ("disk_gib", "free_gib", "promised_gib", "refused"),
    [
        (8, 100, 0, False),
        (8, 100, 92, False),  # exactly what is left once existing disks fill
        (8, 100, 93, True),  # sparse disks of other computers may still grow by 93 GiB
        (8, 7, 0, True),
    ],
)
def test_a_new_disk_must_fit_in_what_existing_disks_leave(
    disk_gib: int, free_gib: int, promised_gib: int, refused: bool
) -> None:
    ram = Room(SHM, 64 * GIB, 0)
    data = Room(DATA, free_gib * GIB, promised_gib * GIB)
    if not refused:
        admit(512 * MIB, ram, disk_gib * GIB, data)
        return
    with pytest.raises(InsufficientStorageError) as caught:
        admit(512 * MIB, ram, disk_gib * GIB, data)
    assert (caught.value.code, caught.value.status) == ("insufficient_storage", 507)
    assert "data filesystem" in caught.value.message


def test_a_start_or_resume_checks_memory_only() -> None:
    full = Room(DATA, 0, 50 * GIB)  # the data filesystem is over-promised already
    admit(512 * MIB, Room(SHM, GIB, 0), 0, full)  # no new disk: nothing to refuse


@pytest.mark.parametrize(
    ("overcommit", "promised_gib", "refused"),
    [(1.0, 93, True), (2.0, 192, False), (2.0, 193, True), (4.0, 392, False)],
)
def test_an_operator_may_let_thin_disks_add_up_past_the_free_space(
    overcommit: float, promised_gib: int, refused: bool
) -> None:
    ram, data = Room(SHM, 64 * GIB, 0), Room(DATA, 100 * GIB, promised_gib * GIB)
    if not refused:
        admit(512 * MIB, ram, 8 * GIB, data, overcommit)
        return
    with pytest.raises(InsufficientStorageError, match=f"{overcommit:g}x the free space|fill\\."):
        admit(512 * MIB, ram, 8 * GIB, data, overcommit)


def test_overcommit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="1 \\(no overcommit\\) or more"):
        Capacity(2, 4096, disk_overcommit=0.5)


def test_admitted_operations_hold_their_room_until_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten creates admitted before any of their files exist cannot promise more than there is."""
    monkeypatch.setattr(space, "_free", lambda path: 40 * GIB)
    ram_dir = tmp_path / "shm"
    ram_dir.mkdir()
    data_dir = DataDir(tmp_path / "data", ram_dir)
    data_dir.computers.mkdir(parents=True)
    capacity = Capacity(2, 64 * 1024)
    host = HostRuntime(data_dir, LocalDriver(), networking=False)
    holds = [capacity.admit_here(host, 512, 8) for _ in range(5)]
    with pytest.raises(InsufficientStorageError, match="40960 MiB promised"):
        capacity.admit_here(host, 512, 8)
    holds[0].release()
    holds[0].release()  # idempotent
    with capacity.admit_here(host, 512, 8):
        assert capacity.ledger.totals() == (5 * 512 * MIB, 5 * 8 * GIB, 0)
    for hold in holds:
        hold.release()
    assert capacity.ledger.totals() == (0, 0, 0)


@pytest.mark.parametrize(
    ("promised_gib", "reserve_gib", "refused"),
    [(192, 0, False), (172, 10, False), (173, 10, True), (0, 100, True)],
)
def test_overcommit_keeps_the_low_watermark_free(
    promised_gib: int, reserve_gib: int, refused: bool
) -> None:
    """Thin disks overcommitted 2x against 100 GiB free, with `reserve_gib` kept free: a new
    8 GiB disk counts on the space above the watermark only, and none is added once the free
    space is all watermark."""
    ram, data = Room(SHM, 64 * GIB, 0), Room(DATA, 100 * GIB, promised_gib * GIB)
    if not refused:
        admit(512 * MIB, ram, 8 * GIB, data, 2.0, reserve_gib * GIB)
        return
    with pytest.raises(InsufficientStorageError, match="kept free"):
        admit(512 * MIB, ram, 8 * GIB, data, 2.0, reserve_gib * GIB)


def test_an_overcommitting_host_keeps_its_watermark_of_its_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`admit_here` keeps `disk_low_watermark` percent of the data filesystem free when it
    overcommits, and nothing when it does not (every disk's growth is then counted whole)."""
    monkeypatch.setattr(space, "_free", lambda path: 10 * GIB)
    ram_dir = tmp_path / "shm"
    ram_dir.mkdir()
    data_dir = DataDir(tmp_path / "data", ram_dir)
    data_dir.computers.mkdir(parents=True)
    host = HostRuntime(data_dir, LocalDriver(), networking=False)
    assert capacity_module.low_watermark(data_dir.root, 99.0) > 10 * GIB - 8 * GIB // 4
    with pytest.raises(InsufficientStorageError, match="kept free"):
        Capacity(2, 64 * 1024, 4.0, 99.0).admit_here(host, 512, 8)
    Capacity(2, 64 * 1024, 1.0, 99.0).admit_here(host, 512, 8).release()  # no overcommit
    Capacity(2, 64 * 1024, 4.0, 0.0).admit_here(host, 512, 8).release()
    with pytest.raises(ValueError, match="percentage"):
        Capacity(2, 4096, 2.0, 100.0)


class FleetHost:
    """A fleet host as admission sees it: its room and its own admission, from its report (its
    data path is not this node's)."""

    def __init__(self, overcommit: float, kept_free: int) -> None:
        self.own = overcommit, kept_free

    def room(self, computer_id: str | None = None, disk: bool = True) -> tuple[Room, Room | None]:
        return Room(SHM, 8 * GIB, 0), Room(Path("/srv/on-that-host"), 10 * GIB, 30 * GIB)

    def admission(self) -> tuple[float, int] | None:
        return self.own


def test_a_fleet_host_admits_by_its_own_overcommit_and_watermark() -> None:
    """A fork or a pool claim's growth on a fleet host: the host's overcommit (4) lets 35 GiB of
    thin disks count on its 10 GiB free, whatever this node's own setting (1); its watermark
    is its own, and this node never looks at a path of that host's."""
    node = Capacity(cpus=2, memory_mib=4096, disk_overcommit=1.0)
    with node.admit_here(FleetHost(4.0, 0), 512, 5):  # type: ignore[arg-type]
        pass
    with pytest.raises(InsufficientStorageError, match="4x the free space above"):
        node.admit_here(FleetHost(4.0, 2 * GIB), 512, 5)  # type: ignore[arg-type]
    overcommitting = Capacity(cpus=2, memory_mib=4096, disk_overcommit=4.0)
    with pytest.raises(InsufficientStorageError):  # the host admits at 1: so is it admitted
        overcommitting.admit_here(FleetHost(1.0, 0), 512, 5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("saved_gib", "overcommit", "reserve_gib", "refused"),
    [
        (8, 1.0, 0, False),  # 92 promised + 8 written: exactly the 100 free
        (9, 1.0, 0, True),
        (54, 2.0, 0, False),  # disks' 92 count at 46; saved memory is written now: whole
        (55, 2.0, 0, True),
        (44, 2.0, 10, False),  # nothing admitted counts on the watermark
        (45, 2.0, 10, True),
    ],
)
def test_saved_memory_counts_whole_against_what_disks_leave(
    saved_gib: int, overcommit: float, reserve_gib: int, refused: bool
) -> None:
    """A pause's or a snapshot's saved memory is written at once: never overcommitted."""
    data = Room(DATA, 100 * GIB, 92 * GIB)
    args = (0, Room(SHM, 0, 0), 0, data, overcommit, reserve_gib * GIB, saved_gib * GIB)
    if not refused:
        admit(*args)
        return
    with pytest.raises(InsufficientStorageError, match="of saved memory does not fit") as caught:
        admit(*args)
    assert caught.value.code == "insufficient_storage"
    assert "smaller disk" not in caught.value.message


def test_a_pause_or_snapshot_is_not_refused_for_ram_it_does_not_take() -> None:
    """The RAM dir over-promised already: a pause (which frees RAM) is not refused for it."""
    over = Room(SHM, GIB, 2 * GIB)
    admit(0, over, 0, Room(DATA, 10 * GIB, 0), saved_bytes=GIB)
    with pytest.raises(InsufficientStorageError, match="guest memory"):
        admit(MIB, over)


def test_a_fleet_hosts_pause_and_snapshot_are_admitted_by_its_report() -> None:
    """Its report's 10 GiB free, 30 GiB promised, at its overcommit of 4: 7.5 GiB counted, so
    2 GiB of saved memory fits and 3 GiB does not; a snapshot's memory is admitted here, its new
    overlay by the host agent (the report cannot leave the computer's own promise out: counting
    it here would count that disk twice)."""
    node = Capacity(cpus=2, memory_mib=4096, disk_overcommit=1.0)
    host = FleetHost(4.0, 0)
    with node.admit_pause(host, 2048):  # type: ignore[arg-type]
        assert node.ledger.totals() == (0, 0, 2 * GIB)
    with pytest.raises(InsufficientStorageError, match="3072 MiB of saved memory"):
        node.admit_pause(host, 3072)  # type: ignore[arg-type]
    with node.admit_snapshot(host, "cmp_a", 2, 1024):  # type: ignore[arg-type]
        assert node.ledger.totals() == (0, 0, GIB)
        with pytest.raises(InsufficientStorageError, match="saved memory"):  # held counts
            node.admit_pause(host, 1537)  # type: ignore[arg-type]
    assert node.ledger.totals() == (0, 0, 0)
    node.admit_pause(host, 1536).release()  # type: ignore[arg-type]


class OwnHost:
    """This server's own host: 10.5 GiB free, cmp_a's disk promised 10 GiB more, its room asked
    for cmp_a leaving that promise out (`HostRuntime.room`)."""

    def room(self, computer_id: str | None = None, disk: bool = True) -> tuple[Room, Room | None]:
        promised = 0 if computer_id == "cmp_a" else 10 * GIB
        return Room(SHM, 8 * GIB, 0), Room(DATA, 10 * GIB + GIB // 2, promised)

    def admission(self) -> tuple[float, int] | None:
        return None

    def flat_copy_bytes(self, computer_id: str) -> int:
        return 0


def test_a_pause_counts_its_own_disk_s_promise_a_snapshot_does_not() -> None:
    """A paused computer keeps its disk, which may fill once it is resumed (a resume admits its
    RAM only): its pause's memory is counted beside that disk's promise. A snapshot freezes the
    disk as a layer: its new overlay takes that promise's place."""
    node, host = Capacity(cpus=2, memory_mib=4096), OwnHost()
    with pytest.raises(InsufficientStorageError, match="1024 MiB of saved memory"):
        node.admit_pause(host, 1024)  # type: ignore[arg-type]
    node.admit_pause(host, 256).release()  # type: ignore[arg-type]
    node.admit_snapshot(host, "cmp_a", 10).release()  # type: ignore[arg-type]


def test_a_fleet_host_agent_admits_a_snapshot_s_overlay_and_a_pause_itself() -> None:
    """The control plane admits only a fleet snapshot's memory (its copy of the host's room
    cannot leave the computer's own promise out); the host agent admits the new overlay where
    it can (`HostRoom.snapshot`), and a pause's memory beside every disk's promise: no room is
    host_full, nothing taken."""
    room = HostRoom(OwnHost())  # type: ignore[arg-type]
    with room.snapshot("cmp_a", 10, 0):
        assert room.capacity.ledger.totals() == (0, 10 * GIB, 0)
    with (
        pytest.raises(HostFullError, match="insufficient_storage"),
        room.snapshot("cmp_a", 10, 1024),
    ):
        pass
    with pytest.raises(HostFullError, match="saved memory"), room.paused(1024):
        pass
    with room.paused(256):
        assert room.capacity.ledger.totals() == (0, 0, 256 * MIB)
    assert room.capacity.ledger.totals() == (0, 0, 0)


def test_a_fleet_host_agent_admits_a_build_snapshot_at_its_disk_s_own_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build computer's spec names no disk (its image's size): the control plane sends 0, and
    the host agent admits its snapshot's new overlay at the size of the disk it has (2 GiB
    here), not at nothing: 1.5 GiB free refuses it, 3 GiB holds 2 GiB while it is taken."""
    free = {"bytes": 3 * GIB // 2}
    monkeypatch.setattr(space, "_free", lambda path: free["bytes"])
    ram_dir = tmp_path / "shm"
    ram_dir.mkdir()
    data_dir = DataDir(tmp_path / "data", ram_dir)
    cdir = data_dir.computer("bld-a")
    cdir.root.mkdir(parents=True)
    with cdir.raw_disk.open("wb") as f:
        f.truncate(2 * GIB)  # sparse: all of it promised
    room = HostRoom(HostRuntime(data_dir, LocalDriver(), networking=False))
    with (
        pytest.raises(HostFullError, match="2048 MiB disk does not fit"),
        room.snapshot("bld-a", 0, 0),
    ):
        pass
    free["bytes"] = 3 * GIB
    with room.snapshot("bld-a", 0, 0):
        assert room.capacity.ledger.totals() == (0, 2 * GIB, 0)
    assert room.capacity.ledger.totals() == (0, 0, 0)

"""Admission arithmetic: a computer is refused before anything is made when its RAM would not fit
in the shared-memory filesystem or its disk on the data filesystem, counting what running guests'
RAM files and existing sparse disks may still grow by."""

from pathlib import Path

import pytest

from sanbox.control.capacity import admit
from sanbox.control.errors import InsufficientStorageError
from sanbox.host.space import Room

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

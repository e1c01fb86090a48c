"""A guest a disk error stopped (`werror=stop`: a full data filesystem, a failing disk): its
computer goes to `error` with the reason in `last_error`, its VM ended, never left `running`;
the others run on. Seen by the VM watcher while the server runs and by the reconciler at start."""

from __future__ import annotations

import logging

from ..fleet.errors import BusyError
from ..host.door import HostError, VmHandle
from .fleet import Fleet
from .states import State

log = logging.getLogger(__name__)

DISK_ERRORS = {
    "nospace": "disk write failed: no space left on the data filesystem; free space on the "
    "host, then start it again (its disk keeps what was written before)",
    "failed": "disk I/O failed: the host's data filesystem returned an error; check the host, "
    "then start it again",
}


async def disk_error(vm: VmHandle) -> str | None:
    """The disk error that stopped the guest (`nospace`, `failed`), or None."""
    try:
        return await vm.disk_error()
    except HostError:  # the monitor is busy or the VM just went: the next round sees it
        return None


async def disk_failed(fleet: Fleet, computer_id: str, error: str) -> None:
    """A disk error stopped the guest: the computer goes to `error` with the reason, its VM
    ends (a start boots it fresh on its disk once the host has room again)."""
    try:
        async with fleet.operating(computer_id, "disk_error"):
            await disk_failed_locked(fleet, computer_id, error)
    except BusyError:  # another API node acts on it: the next round looks again
        return


async def disk_failed_locked(fleet: Fleet, computer_id: str, error: str) -> None:
    row = fleet.by_id(computer_id)
    if row is None or row.state not in (State.RUNNING, State.STARTING):
        return
    why = DISK_ERRORS.get(error, DISK_ERRORS["failed"])
    log.warning("%s stopped on a disk error (%s)", computer_id, error)
    fleet.machines.pop(computer_id, None)
    await fleet.network_down(computer_id)
    await fleet.host_of(row).kill(computer_id)
    fleet.record(
        computer_id, State.ERROR, "computer.error", why, {"disk_error": error}, last_error=why
    )

"""A host told the set it should run (docs/fleet.md, "A host told the set it should run"): the
VMs it runs of computers recorded at rest are stopped, the computers it holds that are not placed
on it are set aside, the snapshots it holds that are not its own are deleted.

The watch of the hosts (hosts.py) asks for it whenever a host is registered again (a new epoch:
its agent restarted, it was lost and answers again, it joined again) or first seen by this node.
Each host's settle runs in the background, one at a time per host, within `SETTLE_DEADLINE`: a
host that holds its answers (a slow one, or a compromised one) holds its own settle back, never
the round that renews every host's lease. A settle cut short, or that failed, runs again at the
host's first round `SETTLE_GAP` after it began; and every host is told its set again every
`SETTLE_EVERY` (a create whose answer was lost, its undo with it, while the host kept its lease,
left a VM with no record).

A settle costs the control plane: up to `MOST_STEPS` operations written and calls made. A host
agent that restarts takes a new epoch, and a real restart is told its set at its first round;
but a host that names a new process epoch every round (a compromised one, or an agent in a
restart loop) would be registered again and settled every round. So a restart within
`SETTLE_GAP` of the last restart's settle waits for the gap to pass (the host's registration,
and so its lease and its fencing, is not held back; only what it is told), said once in the
log: such a host is settled once a gap, with its newest report. A host registered again for
another reason (lost and answering again: at most once per lost lease; joined again: an
operator's word; first seen by this node) is told at once.

Each step takes the item's one incomplete operation (fleet/operations.py) and reads the records
again under it: a verb or a move at work on the item (a move to this host has its record name
the source until its end) is left to finish, and none can begin between the check and the act.
An item no record names takes none (no verb can be at work on it): ids a host makes up write
nothing to the records. What a host reports is its word, and a compromised host may list any
number of ids (its report's lists are bounded where it is read, `fleet/link/wire.py`): one
settle acts on at most `MOST_STEPS` items, the rest waiting for its next settle."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from sqlalchemy import select

from ..fleet.errors import BusyError
from ..fleet.link import wire
from ..fleet.link.remote import RemoteHost
from ..fleet.operations import Operations
from ..host.door import HostError, Liveness
from ..store import Database
from ..store.fleet_models import BuildVmRow, HostRow
from ..store.models import ComputerRow, SnapshotRow
from ..tasks import cancel_and_wait
from . import build_vms
from .states import State

log = logging.getLogger(__name__)
MOST_STEPS = 256  # items one settle acts on: a host that lists many waits its next settle
AT_REST = (State.STOPPED, State.PAUSED, State.SUSPENDED, State.ERROR)  # no VM may run
SETTLE_DEADLINE = 60.0  # one host's settle at most; cut, it runs again at its next round
STEP_DEADLINE = 15.0  # one call of it (a VM stopped, a folder set aside, a snapshot deleted)
SETTLE_EVERY = 600.0  # and again this often (a create whose answer was lost, its host still up)
SETTLE_GAP = 60.0  # a failed settle, or one for an agent's restart, at most once in this long
HELD_SAID_EVERY = 600.0  # a host's held restarts are logged once in this long
KIND = "settle"  # the operation a step holds on its item

Told = tuple[HostRow, RemoteHost, dict[str, Any]]  # the host, its link, the report to settle


class HostSets:
    def __init__(self, db: Database, node: str | None = None) -> None:
        self.db, self.node = db, node
        self.operations = Operations(db)
        self._tasks: dict[str, asyncio.Task[None]] = {}  # host name -> its settle
        self._next: dict[str, Told] = {}  # host name -> the newer report to settle after it
        self._failed: set[str] = set()  # host names whose last settle did not end whole
        self._told_at: dict[str, float] = {}  # host name -> when its last settle began
        self._told_in: dict[str, int] = {}  # host name -> the epoch it was last told its set in
        self._restarting: set[str] = set()  # host names whose agent restarted, not told since
        self._restart_told: dict[str, float] = {}  # host name -> when a restart's settle began
        self._held_said: dict[str, float] = {}  # host name -> when its held restart was logged

    def due(self, name: str, epoch: int, restarted: bool) -> bool:
        """Whether to tell the host its set now, at a round that found it in `epoch`
        (`restarted`: its agent named a new process epoch this round). In an epoch it was not
        told in: yes, unless its agent restarted and a restart's settle began within
        `SETTLE_GAP` (then once the gap has passed). In the same epoch, none of its settles
        running: its last was cut or failed and began `SETTLE_GAP` ago, or began
        `SETTLE_EVERY` ago."""
        now = asyncio.get_running_loop().time()
        if restarted:
            self._restarting.add(name)
        if self._told_in.get(name) != epoch:
            if name not in self._restarting:
                return True
            if now - self._restart_told.get(name, -math.inf) >= SETTLE_GAP:
                return True
            self._say_held(name, now)
            return False
        running = self._tasks.get(name)
        if running is not None and not running.done():
            return False
        since = now - self._told_at.get(name, -math.inf)
        return since >= SETTLE_GAP if name in self._failed else since > SETTLE_EVERY

    def tell(self, row: HostRow, link: RemoteHost, report: dict[str, Any], epoch: int) -> None:
        """Settle the host against `report` (read in `epoch`) in the background; while one of
        its settles runs, the newest report asked for is settled after it."""
        now = asyncio.get_running_loop().time()
        self._told_in[row.name] = epoch
        if row.name in self._restarting:
            self._restarting.discard(row.name)
            self._restart_told[row.name] = now
        running = self._tasks.get(row.name)
        if running is not None and not running.done():
            self._next[row.name] = (row, link, report)
            return
        self._told_at[row.name] = now
        self._tasks[row.name] = asyncio.ensure_future(self._settling((row, link, report)))

    def _say_held(self, name: str, now: float) -> None:
        """Log, once in `HELD_SAID_EVERY`, that the host's restarts come faster than it is told
        its set."""
        if now - self._held_said.get(name, -math.inf) < HELD_SAID_EVERY:
            return
        self._held_said[name] = now
        log.warning(
            "host %s names a new process epoch again within %g s of the last it was told its set "
            "for (an agent restarting in a loop, or a compromised host): it is told its set once "
            "in %g s, not at every restart",
            name,
            SETTLE_GAP,
            SETTLE_GAP,
        )

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            await cancel_and_wait(task)
        self._tasks.clear()

    async def _settling(self, told: Told | None) -> None:
        while told is not None:
            row, link, report = told
            try:
                async with asyncio.timeout(SETTLE_DEADLINE):
                    await self.settle(row, link, report)
                self._failed.discard(row.name)
            except Exception as exc:  # its own work only: told again at its next round
                self._failed.add(row.name)
                log.warning(
                    "host %s was not told the set it should run whole (%s): again next round",
                    row.name,
                    str(exc) or type(exc).__name__,
                )
            told = self._next.pop(row.name, None)

    async def settle(self, row: HostRow, link: RemoteHost, report: dict[str, Any]) -> None:
        """Tell a host the set it should run. The database is read after the report: a computer
        or a snapshot is recorded (committed) before its host makes it, and a move's operation
        is held from before its import until its record names the host it went to. The report
        is the host's word: an id of no shape an id has is passed over, and one settle acts on
        at most `MOST_STEPS` items (the rest at its next)."""
        computers = {
            cid: seen
            for cid, seen in dict(report["computers"]).items()
            if isinstance(cid, str) and wire.COMPUTER_ID.fullmatch(cid)
        }
        running = Liveness.ALIVE.value
        alive = {cid for cid, seen in computers.items() if _liveness(seen) == running}
        resting = await asyncio.to_thread(self._at_rest_on, row.id, alive)
        placed = await asyncio.to_thread(self._placed_on, row.id, set(computers))
        strangers = set(computers) - placed
        snapshots = {
            sid
            for sid in report.get("snapshots") or ()
            if isinstance(sid, str) and wire.SNAPSHOT_ID.fullmatch(sid)
        }
        strays = await asyncio.to_thread(self._not_its_own, row.id, snapshots)
        unknown = await asyncio.to_thread(self._unrecorded, strangers, set(strays))
        # what the records name first: ids a host made up never hold back the ones it holds
        steps = [
            *(partial(self._stop_at_rest, row, link, cid) for cid in sorted(resting)),
            *(
                partial(self._set_aside, row, link, cid, cid in unknown)
                for cid in sorted(strangers, key=lambda cid: (cid in unknown, cid))
            ),
            *(
                partial(self._drop_snapshot, row, link, sid, sid in unknown)
                for sid in sorted(strays, key=lambda sid: (sid in unknown, sid))
            ),
        ]
        if len(steps) > MOST_STEPS:
            log.warning(
                "host %s: %d items to settle, more than one settle acts on (%d): the rest at its "
                "next settle",
                row.name,
                len(steps),
                MOST_STEPS,
            )
        for step in steps[:MOST_STEPS]:
            await step()

    @contextlib.asynccontextmanager
    async def _holding(
        self, item_id: str, host_id: str, unknown: bool = False
    ) -> AsyncIterator[bool]:
        """The item's one incomplete operation for a step, within `STEP_DEADLINE` (False: a
        verb or a move holds it, and its own end leaves it right). An item no record names
        (`unknown`) takes none: no verb can work on it, and an id a host made up writes
        nothing to the records."""
        if unknown:
            async with asyncio.timeout(STEP_DEADLINE):
                yield True
            return
        try:
            op = self.operations.begin(item_id, KIND, host_id, self.node)
        except BusyError:
            yield False
            return
        try:
            async with asyncio.timeout(STEP_DEADLINE):
                yield True
        finally:
            self.operations.finish(op.op_id)

    async def _stop_at_rest(self, row: HostRow, link: RemoteHost, computer_id: str) -> None:
        """A VM the host runs for a computer recorded at rest (stopped, paused, suspended, error)
        on it: a stop or pause whose answer was lost. Its folder, disk and saved memory stay."""
        async with self._holding(computer_id, row.id) as held:
            if not held or not self._at_rest_on(row.id, {computer_id}):
                return
            try:
                await link.kill(computer_id)
            except HostError as exc:
                log.warning("host %s: %s could not be stopped: %s", row.name, computer_id, exc)
                return
        log.warning(
            "host %s still ran the VM of %s, which is recorded at rest: its VM stopped (its "
            "disk kept)",
            row.name,
            computer_id,
        )

    async def _set_aside(
        self, row: HostRow, link: RemoteHost, computer_id: str, unknown: bool
    ) -> None:
        """A computer the host holds that is not placed on it (its record deleted while the host
        was away or forgotten, a create whose undo could not reach it, the first copy of a
        move): its VM stopped, its folder set aside, disks kept."""
        async with self._holding(computer_id, row.id, unknown) as held:
            if not held or self._placed_on(row.id, {computer_id}):
                return
            try:
                to = await link.quarantine(computer_id)
            except HostError as exc:
                log.warning("host %s: %s could not be set aside: %s", row.name, computer_id, exc)
                return
        log.warning(
            "host %s held computer %s, which is not placed on it: its VM stopped, its folder "
            "set aside in %s",
            row.name,
            computer_id,
            to,
        )

    async def _drop_snapshot(
        self, row: HostRow, link: RemoteHost, snapshot_id: str, unknown: bool
    ) -> None:
        """A snapshot the host holds with no record (deleted while the host was away), or whose
        ready record names another host with no move under way (the first copy of a move whose
        delete did not reach it). One being moved here has its move's operation until its record
        names this host: left alone."""
        async with self._holding(snapshot_id, row.id, unknown) as held:
            why = self._not_its_own(row.id, {snapshot_id}).get(snapshot_id) if held else None
            if why is None:
                return
            try:
                await link.delete_snapshot(snapshot_id)
            except HostError as exc:
                log.warning("host %s: snapshot %s stays: %s", row.name, snapshot_id, exc)
                return
        log.warning("host %s held snapshot %s, %s: deleted", row.name, snapshot_id, why)

    def _not_its_own(self, host_id: str, snapshot_ids: set[str]) -> dict[str, str]:
        """Of the snapshots the host holds, those to delete there, each with why."""
        found = dict.fromkeys(snapshot_ids, "which has no record")
        with self.db.session() as s:
            for snap in s.scalars(select(SnapshotRow).where(SnapshotRow.id.in_(snapshot_ids))):
                del found[snap.id]
                if snap.state == "ready" and snap.host_id not in (None, host_id):
                    found[snap.id] = f"whose record names host {snap.host_id}"
        return found

    def _unrecorded(self, computer_ids: set[str], snapshot_ids: set[str]) -> set[str]:
        """Of the computers and snapshots a host holds, those no record names (no computer, no
        build VM, no snapshot, on any host)."""
        with self.db.session() as s:
            known = set(s.scalars(select(ComputerRow.id).where(ComputerRow.id.in_(computer_ids))))
            known |= set(s.scalars(select(BuildVmRow.id).where(BuildVmRow.id.in_(computer_ids))))
            known |= set(s.scalars(select(SnapshotRow.id).where(SnapshotRow.id.in_(snapshot_ids))))
        return (computer_ids | snapshot_ids) - known

    def _at_rest_on(self, host_id: str, computer_ids: set[str]) -> set[str]:
        """Of the computers whose VMs the host runs, those recorded at rest on it."""
        with self.db.session() as s:
            found = s.scalars(
                select(ComputerRow.id).where(
                    ComputerRow.id.in_(computer_ids),
                    ComputerRow.host_id == host_id,
                    ComputerRow.state.in_([str(st) for st in AT_REST]),
                )
            )
            return set(found)

    def _placed_on(self, host_id: str, computer_ids: set[str]) -> set[str]:
        """Of the computers the host holds, those placed on it, and the VMs template builds run
        there."""
        with self.db.session() as s:
            found = s.scalars(
                select(ComputerRow.id).where(
                    ComputerRow.id.in_(computer_ids), ComputerRow.host_id == host_id
                )
            )
            placed = set(found)
        return placed | (build_vms.on_host(self.db, host_id) & computer_ids)


def _liveness(seen: object) -> object:
    return seen.get("liveness") if isinstance(seen, dict) else None


__all__ = ["AT_REST", "MOST_STEPS", "HostSets"]

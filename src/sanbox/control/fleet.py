"""The fleet on this host, as the verbs share it: the store's records and their events, one lock
per computer (one transition at a time, many computers in parallel), the running machines, the
idle clocks, and each computer's network coming up and down. The verbs (`create`, `lifecycle`,
`pausing`, `guest`, `network`) act through it, and `Computers` is their one front door; this
module imports no verb."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..fleet.errors import BusyError, HostForgottenError
from ..fleet.operations import Operation, Operations, node_name
from ..host.door import (
    RECIPES,
    EgressControl,
    Host,
    HostError,
    Image,
    Machine,
    MachineSpec,
    Policy,
    PolicyError,
    Reach,
)
from ..store import Database, repo
from ..store.models import ComputerRow, Org
from ..tasks import cancel_and_wait
from . import deadlines, quotas
from .activity import ActivityClocks
from .capacity import Capacity
from .errors import HostUnavailableError, NotFoundError
from .events import EventBus
from .host_errors import agent_unavailable, from_host
from .jobs import Jobs
from .secret_book import SecretBook
from .states import State, check_action, check_transition

if TYPE_CHECKING:
    from .fleet_egress import FleetEgress
    from .hosts import FleetHosts

log = logging.getLogger(__name__)

VERB_WAIT = 30.0  # seconds a verb waits for another API node's operation on the computer

# the states a computer's running time starts from (not a pause that failed: it ran on)
_COMING_UP = frozenset({State.CREATING, State.STARTING, State.RESUMING})
_AT_REST = frozenset({State.PAUSED, State.SUSPENDED, State.STOPPED})  # `rested_at` is set


class Fleet:
    def __init__(
        self,
        db: Database,
        runtime: Host,
        bus: EventBus,
        home: Path,
        capacity: Capacity | None = None,
        egress: EgressControl | None = None,
        reach: Reach | None = None,
    ) -> None:
        self.home = home  # the control plane's own files: template logs, contexts, caches
        self.egress = egress
        self.reach = reach or Reach()  # where allow rules may point (the operator's ranges)
        self.db = db
        self.runtime = runtime
        self.bus = bus
        self.capacity = capacity or Capacity.of_host()
        self.machines: dict[str, Machine] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.busy: dict[str, int] = {}  # computer id -> operations in progress
        self.clocks = ActivityClocks(db)  # last activity, for the idle watcher
        self.book: SecretBook | None = None  # the secrets bound to computers (Computers sets it)
        self.remote: FleetHosts | None = None  # the fleet's joined hosts (Computers sets it)
        self.operations = Operations(db)  # one incomplete per computer across API nodes
        self.node = node_name(home)
        self.far: FleetEgress | None = None  # fleet hosts' egress, over the links (Computers)
        self.jobs = Jobs(db, self.node)  # the singleton jobs this node runs now (control/jobs.py)

    # plumbing -------------------------------------------------------------------------------

    async def network_up(self, computer_id: str) -> None:
        """Firewall, DNS filter and egress proxy for a computer that now runs."""
        row = self.by_id(computer_id)
        egress = self.egress_of(row) if row is not None else None
        if row is not None and egress is None and row.host_id and self.far is not None:
            why = "egress is off: its host does not answer; it starts when the host answers"
            self.record(computer_id, None, "network.error", why)
        if egress is None or row is None:
            return
        try:
            await egress.start(computer_id, Policy.of(row.allow))
        except (HostError, OSError, PolicyError) as exc:  # fails closed: no listener, no egress
            log.error("egress for %s could not start: %s", computer_id, exc)
            self.record(computer_id, None, "network.error", f"egress is off: {exc}")

    async def network_down(self, computer_id: str) -> None:
        row = self.by_id(computer_id)
        egress = self.egress_of(row) if row is not None else self.egress
        if egress is None:
            return
        try:
            await egress.stop(computer_id)
        except HostError as exc:  # a fleet host's: the egress watch stops it when it answers
            log.warning("egress of %s was not stopped on its host: %s", computer_id, exc)

    def egress_of(self, row: ComputerRow) -> EgressControl | None:
        """The egress gateway of the computer's host: this server's own, or a fleet host's driven
        over its link (None while that host does not answer: `fleet_egress.py` applies the
        records when it does)."""
        if row.host_id is None:
            return self.egress
        return self.far.of(row.host_id) if self.far is not None else None

    def lock(self, computer_id: str) -> asyncio.Lock:
        return self._locks.setdefault(computer_id, asyncio.Lock())

    @contextlib.asynccontextmanager
    async def operating(
        self, computer_id: str, kind: str, host_id: str | None = None, wait: float = 0.0
    ) -> AsyncIterator[None]:
        """The computer's lock on this node and its one incomplete operation across every API
        node (fleet/operations.py) for the block; another node's operation on it is waited
        for up to `wait` seconds, then `busy` (409). It is beaten while the block runs (a long
        one is not taken for a dead node's), and ends `done`, or `failed` with what the block
        raised."""
        async with self.lock(computer_id):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait
            while True:
                try:
                    op = self.operations.begin(computer_id, kind, host_id, self.node)
                    break
                except BusyError:
                    if loop.time() >= deadline:
                        raise
                    await asyncio.sleep(0.2)
            async with self.carrying(op):
                yield

    @contextlib.asynccontextmanager
    async def carrying(self, op: Operation) -> AsyncIterator[None]:
        """An operation begun (`operations.begin`) carried through the block: beaten while it
        runs, then `done`, or `failed` with what the block raised."""
        error: str | None = None
        async with self.operations.carried(op, self.node) as held:
            try:
                yield
            except BaseException as exc:
                error = f"{type(exc).__name__}: {exc}"[:500]
                raise
            finally:
                self.operations.finish(held.op.op_id, error)

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            await cancel_and_wait(task, (Exception,))
        for machine in list(self.machines.values()):
            with contextlib.suppress(Exception):
                await machine.agent.close()
        self.machines.clear()
        self.jobs.close()

    def record(
        self,
        computer_id: str,
        dst: State | None,
        event: str,
        message: str,
        data: dict[str, Any] | None = None,
        **fields: Any,
    ) -> ComputerRow:
        """Move a computer to `dst` (checked against the table, and against its org's quota when
        it comes back to compute; a lifetime over at rest given again when it comes up), set
        fields, write the event."""
        with self.db.session() as s:
            row = repo.computer_by_id(s, computer_id)
            if row is None:
                raise NotFoundError(f"computer {computer_id} not found", "computer_not_found")
            if dst is not None and dst != row.state:
                check_transition(State(row.state), dst)
                if dst in quotas.COMPUTE and row.state not in quotas.COMPUTE:  # start, resume
                    quotas.check(s, row.org_id, quotas.Use.compute(row))
                if dst == State.RUNNING and row.state in _COMING_UP:  # max_running counts
                    deadlines.begin_again(row, datetime.now(UTC))  # a lifetime over at rest too
                elif dst == State.RUNNING:  # a pause run on (failed, interrupted): its lifetime too
                    row.pause_ended_lifetime = False
                if dst in _AT_REST:
                    row.rested_at = datetime.now(UTC)
                row.state = dst
            for key, value in fields.items():
                setattr(row, key, value)
            ev = repo.add_event(s, row.org_id, row.id, event, message, data)
        self.bus.publish(ev)
        return row

    def get(self, org: Org, ref: str) -> ComputerRow:
        with self.db.session() as s:
            row = repo.computer(s, org.id, ref)
        if row is None:
            raise NotFoundError(f"no computer named {ref!r}: see `sanbox ls`", "computer_not_found")
        return row

    def list(
        self, org: Org, state: str | None = None, labels: dict[str, str] | None = None
    ) -> list[ComputerRow]:
        with self.db.session() as s:
            return repo.list_computers(s, org.id, state, labels)

    def host_of(self, row: ComputerRow) -> Host:
        """The host that holds a computer: this server's own, or a fleet host over its link
        (`host_unreachable` when there is none now, `host_forgotten` when there never will be
        again: nothing is done)."""
        return self.host_at(row.host_id, f"computer {row.name}'s host")

    def host_at(self, host_id: str | None, what: str = "the host") -> Host:
        """Host `host_id` (None: this server's own)."""
        if host_id is None:
            return self.runtime
        if self.remote is None:
            raise HostUnavailableError(f"{what} is not known to this server")
        try:
            return self.remote.host(host_id)
        except HostForgottenError as exc:  # for good: what it held went with it
            raise HostForgottenError(f"{what}: {exc.message}", exc.host) from exc
        except HostError as exc:
            raise HostUnavailableError(f"{what}: {exc}") from exc

    def image_for(
        self, template: str, build_id: str | None = None, host: Host | None = None
    ) -> Image:
        """The template's current build (for a new computer), or `build_id` while it is there,
        on `host` (this server's own by default)."""
        on = host or self.runtime
        try:
            if template not in RECIPES and build_id is not None:  # an org's own template
                return on.build(build_id)
            return on.image(template, build_id)
        except HostError as exc:
            raise from_host(exc, "finding its image") from exc

    def image_of(self, row: ComputerRow) -> Image:
        """The build a computer's disk came from: it boots that kernel and initramfs (their
        modules and agent match its disk) and its saved memory stays compatible after a rebuild."""
        return self.image_for(row.template, row.image, self.host_of(row))

    def spec(self, row: ComputerRow, disk_gib: int | None = None) -> MachineSpec:
        return MachineSpec(
            computer_id=row.id,
            vcpus=row.vcpus,
            memory_mib=row.memory_mib,
            disk_gib=disk_gib,
            hostname=row.name,
        )

    @contextlib.asynccontextmanager
    async def acting(self, org: Org, ref: str, action: str) -> AsyncIterator[ComputerRow]:
        """The computer under its lock, read afresh there, with `action` allowed in its state."""
        row = self.get(org, ref)
        async with self.operating(row.id, action, row.host_id, wait=VERB_WAIT):
            row = self.get(org, row.id)
            check_action(action, State(row.state), row.name)
            yield row

    async def came_up(self, computer_id: str, machine: Machine) -> None:
        """A computer's VM now runs (created, booted or resumed): keep it, start its idle clock
        and its network."""
        self.machines[computer_id] = machine
        self.touch(computer_id)
        await self.network_up(computer_id)
        await self.trust_secrets(computer_id, machine)

    async def trust_secrets(self, computer_id: str, machine: Machine) -> None:
        """The org's CA in a guest with bound secrets (at create, boot, resume, fork, bind).
        Never on a machine that is not isolated (a local process, in tests): its store is the
        host's."""
        if not machine.isolated:
            return
        why = await self.book.trust(machine.agent, computer_id) if self.book else None
        if why is not None:
            self.record(
                computer_id,
                None,
                "secret.trust_failed",
                f"the org's CA could not be installed in the guest: {why}",
            )

    # the guest ------------------------------------------------------------------------------

    async def machine_locked(self, row: ComputerRow) -> Machine:
        """The running machine of `row`, whose lock the caller holds."""
        check_action("use", State(row.state), row.name)
        host = self.host_of(row)  # a fleet host that does not answer: said now, not in a hang
        machine = self.machines.get(row.id)
        if machine is not None and machine.vm.alive():
            return machine
        try:
            machine = await host.attach(row.id)
        except HostError as exc:
            if exc.code == HostUnavailableError.code:  # its host did not answer: not stopped
                raise HostUnavailableError(f"computer {row.name}'s host: {exc}") from exc
            machine = None
        except Exception as exc:  # agent unreachable on a live VM
            raise agent_unavailable(exc, row.id) from exc
        if machine is None:
            await self.vm_exited(row.id, "its VM process is gone")
            check_action("use", State.STOPPED, row.name)
        assert machine is not None
        self.machines[row.id] = machine
        return machine

    def by_id(self, computer_id: str) -> ComputerRow | None:
        with self.db.session() as s:
            return repo.computer_by_id(s, computer_id)

    async def vm_exited(self, computer_id: str, why: str, pausing: bool = False) -> None:
        """The VM of a running computer died: record it as stopped, disk kept. `pausing`: told by
        the pause that failed (under the computer's lock), whose `pausing` record is stopped too;
        anyone else leaves a pause's record to the pause."""
        self.machines.pop(computer_id, None)
        await self.network_down(computer_id)
        with self.db.session() as s:
            row = repo.computer_by_id(s, computer_id)
            state = row.state if row else None
        if row is None:  # its record is gone: whatever ran of it here ends
            await self.runtime.kill(computer_id)
            return
        host = self.host_of(row)
        await host.kill(computer_id)
        if state not in (State.RUNNING, State.STARTING, State.STOPPING) and not (
            pausing and state == State.PAUSING
        ):
            return
        lines = await host.console_lines(computer_id, 4)
        tail = " | ".join(line.strip() for line in lines)
        self.record(
            computer_id,
            State.STOPPED,
            "computer.vm_exited",
            f"stopped: {why}; disk kept, `sanbox start` boots it again",
            {"console": tail},
        )

    def remove_record(self, computer_id: str, why: str = "deleted") -> None:
        """A computer gone from the host: its record removed, its last event written (events
        outlive computers), its lock and idle clock dropped."""
        with self.db.session() as s:
            live = repo.computer_by_id(s, computer_id)
            if live is None:
                return
            s.delete(live)
            ev = repo.add_event(s, live.org_id, computer_id, "computer.deleted", why)
        self.bus.publish(ev)
        self._locks.pop(computer_id, None)
        self.clocks.forget(computer_id)
        if self.book is not None:
            self.book.forget(computer_id)

    def touch(self, computer_id: str) -> None:
        self.clocks.touch(computer_id)

    def keep_in_use(self) -> None:
        """Touch every computer with an operation in progress here, so that its stored use
        (what the other API nodes see) stays fresh while a shell or a long exec is open."""
        for computer_id, n in list(self.busy.items()):
            if n:
                self.touch(computer_id)

    def idle_for(self, computer_id: str) -> float:
        """Seconds since the last activity; 0 while an operation is in progress."""
        if self.busy.get(computer_id):
            return 0.0
        return self.clocks.idle_for(computer_id)

    @contextlib.asynccontextmanager
    async def activity(self, computer_id: str) -> AsyncIterator[None]:
        """Marks an operation (exec, shell, transfer, port) on a computer, for the idle watcher."""
        self.touch(computer_id)
        self.busy[computer_id] = self.busy.get(computer_id, 0) + 1
        try:
            yield
        finally:
            self.busy[computer_id] -= 1
            self.touch(computer_id)

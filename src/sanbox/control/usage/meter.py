"""The meter: every few seconds, for every computer, the interval it is in is checked (its
`checked_at` moved to now: what a crash can later prove), its counters read into it (the VM's
cgroup CPU time; egress bytes where the proxy counts them), and it is cut where it must be (every
minute while it has compute, at each hour boundary at rest) so consumers get usage as it accrues.
It also keeps, in memory and for a bounded window, what each running guest reports of itself
(CPU %, memory and disk used): `GET /v1/computers/{ref}/metrics`.

A computer the host cannot measure (a VM with no cgroup here, as the component tier's local
processes) reads None: its CPU time stays unmeasured, never a made-up 0. One on a fleet host whose
last report does not show its VM running (the host silent, lost or forgotten, or the VM gone) is
not vouched for: its interval is neither checked nor cut until the host shows it again, so a lost
host's computers are not billed as running meanwhile (a VM the host ran all along is, once the
host is back; one closed while its host is silent closes where it was last seen: `unseen`).
A template build's VM is metered the same way while its record lasts (`build_vms.py`)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from ...fleet.link.remote import RemoteHost
from ...fleet.link.vm import RemoteVm
from ...host.door import Liveness
from ...store.fleet_models import BuildVmRow
from ...store.models import ComputerRow, UsageRow
from ..fleet import Fleet
from ..jobs import USAGE
from ..quotas import COMPUTE
from . import ledger
from .ledger import Reading

log = logging.getLogger(__name__)

RUNNING_PERIOD = 60.0  # seconds: a computer with compute closes an interval this often
SAMPLE_INTERVAL = 5.0  # seconds between samples
WINDOW = 3600.0  # seconds of guest metrics kept per computer
METRICS_TIMEOUT = 2.0  # a guest slower than this to report is skipped this round
STALE_SAMPLES = 3  # an interval not vouched for in this many samples was not seen meanwhile
RUNNING = "running"


@dataclass(frozen=True)
class Sample:
    """What a guest reported of itself at `time` (Unix seconds)."""

    time: float
    cpu_percent: float | None  # of its vCPUs together, since the previous sample
    memory_used: int
    memory_total: int
    disk_used: int
    disk_total: int
    memory_cache: int = 0  # the page cache (0 from an agent that does not report it)


class Meter:
    def __init__(
        self,
        fleet: Fleet,
        running_period: float = RUNNING_PERIOD,
        window: float = WINDOW,
        sample_interval: float = SAMPLE_INTERVAL,
    ) -> None:
        self.fleet = fleet
        self.running_period = running_period
        self.sample_interval = sample_interval
        self.keep = max(2, int(window / sample_interval))
        self._samples: dict[str, collections.deque[Sample]] = {}
        self._busy_cpu: dict[str, tuple[float, float]] = {}  # guest (busy, total) seconds
        self._swept_hour: datetime | None = None  # intervals at rest are cut once an hour

    def measure(self, computer_id: str) -> Reading:
        """The VM's counters now (cheap, synchronous: the ledger calls it inside a flush; no
        database read, no call), from whichever host runs it: this server's own, or a fleet
        host's last report (that host's alone: another host's report naming the computer is not
        believed)."""
        fleet, far = self.fleet, self._runs_on(computer_id)
        cpu = None
        with contextlib.suppress(OSError):
            cpu = fleet.runtime.cpu_usec(computer_id)
        if cpu is None and fleet.remote is not None:
            cpu = fleet.remote.cpu_usec(computer_id, far)
        carried = fleet.egress.carried(computer_id) if fleet.egress is not None else None
        if carried is None and fleet.far is not None:
            carried = fleet.far.carried(computer_id, far)
        return Reading(cpu_usec=cpu, egress_bytes=carried)

    def _runs_on(self, computer_id: str) -> RemoteHost | None:
        """The fleet host this server runs the computer's machine on (None: none, or its own)."""
        machine = self.fleet.machines.get(computer_id)
        vm = machine.vm if machine is not None else None
        return vm.host if isinstance(vm, RemoteVm) else None

    def last_seen(
        self, computer_id: str, host_id: str | None, interval: UsageRow, now: datetime
    ) -> datetime | None:
        """Where an interval with compute closes if its VM is not seen running now (`unseen`) and
        nothing vouched for it for a few samples: where it was last seen to hold (`checked_at`).
        None: now (one seen, or seen a moment ago: a stop's own end of its VM)."""
        if not self.unseen(computer_id, host_id, interval.state):
            return None
        stale = (now - interval.checked_at).total_seconds() > STALE_SAMPLES * self.sample_interval
        return interval.checked_at if stale else None

    def unseen(self, computer_id: str, host_id: str | None, state: str) -> bool:
        """Whether a computer's VM is not seen running now, by its fleet host's last report: the
        host is silent, lost or forgotten, or it shows no VM for a computer recorded running (one
        being made or started is not there yet). Nothing vouches for its interval meanwhile."""
        seen = self._liveness(computer_id, host_id)
        return seen is Liveness.UNKNOWN or (seen is Liveness.DEAD and state == RUNNING)

    def _liveness(self, computer_id: str, host_id: str | None) -> Liveness:
        """A fleet host's computer's, by its host's last report; ALIVE for this server's own (its
        VMs' ends are the reconciler's)."""
        remote = self.fleet.remote
        if host_id is None or remote is None:
            return Liveness.ALIVE
        return remote.liveness(host_id, computer_id)

    def samples(self, computer_id: str) -> list[Sample]:
        return list(self._samples.get(computer_id, ()))

    def forget(self, computer_id: str) -> None:
        self._samples.pop(computer_id, None)
        self._busy_cpu.pop(computer_id, None)

    # one round ------------------------------------------------------------------------------

    def check_intervals(self) -> int:
        """Check, read and cut the open intervals with compute (and, once an hour has turned,
        those at rest), in one transaction; how many were cut. An interval at rest is not
        written between hours: nothing about it changes, and a crash cannot make it wrong."""
        cut = 0
        with self.fleet.db.session() as s:
            now = ledger.db_now(s)
            q = select(UsageRow).where(UsageRow.ended_at.is_(None))
            hour = ledger.hour_floor(now)
            if hour == self._swept_hour:
                q = q.where(UsageRow.state.in_(COMPUTE))
            rows = s.scalars(q.with_for_update()).all()
            placed = select(ComputerRow.id, ComputerRow.host_id).where(
                ComputerRow.host_id.is_not(None)
            )
            on = {cid: host for cid, host in s.execute(placed) if host is not None}
            builds = select(BuildVmRow.id, BuildVmRow.host_id).where(
                BuildVmRow.host_id.is_not(None)
            )  # a build's VM on a fleet host is vouched for by its host's report too
            on.update({vm: host for vm, host in s.execute(builds) if host is not None})
            for row in rows:
                reading = Reading()
                host_id = on.get(row.computer_id)
                if row.state in COMPUTE and self.unseen(row.computer_id, host_id, row.state):
                    continue  # not seen running now: nothing vouches for it
                ours = row.kind == "build" or row.computer_id in self.fleet.machines
                if row.state in COMPUTE and ours:  # (a build's VM: whichever host runs it)
                    reading = self.measure(row.computer_id)
                at = ledger.due_at(row, now, self.running_period)
                if at is not None:
                    ledger.rotate(s, row, at, reading)
                    cut += 1
                elif row.state in COMPUTE:
                    ledger.read_into(row, reading)
                    row.checked_at = now
        self._swept_hour = hour
        return cut

    async def sample_guests(self) -> None:
        """Ask every running guest for its metrics (in parallel, each bounded in time)."""
        machines = list(self.fleet.machines.items())
        await asyncio.gather(*(self._sample(cid, m) for cid, m in machines))
        for gone in set(self._samples) - {cid for cid, _m in machines}:
            if self.fleet.by_id(gone) is None:
                self.forget(gone)

    async def _sample(self, computer_id: str, machine: object) -> None:
        try:
            agent = machine.agent  # type: ignore[attr-defined]
            m = await asyncio.wait_for(agent.metrics(), METRICS_TIMEOUT)
        except asyncio.CancelledError:
            raise
        except Exception:  # a guest busy, restarting or gone: no sample this round
            return
        idle = m.cpu_seconds.get("idle", 0.0) + m.cpu_seconds.get("iowait", 0.0)
        total = sum(m.cpu_seconds.values())
        pct = None
        before = self._busy_cpu.get(computer_id)
        if before is not None and total > before[1]:
            pct = round(100.0 * ((total - idle) - before[0]) / (total - before[1]), 1)
            pct = min(100.0, max(0.0, pct))
        self._busy_cpu[computer_id] = (total - idle, total)
        memory_total = m.memory.get("total", 0)
        sample = Sample(
            time=time.time(),
            cpu_percent=pct,
            memory_used=memory_total - m.memory.get("available", 0),
            memory_total=memory_total,
            disk_used=m.disk.get("total", 0) - m.disk.get("free", 0),
            disk_total=m.disk.get("total", 0),
            memory_cache=m.memory.get("cached", 0),
        )
        self._samples.setdefault(computer_id, collections.deque(maxlen=self.keep)).append(sample)

    async def tick(self) -> None:
        if await self.fleet.jobs.holds(USAGE):  # one API node writes them (control/jobs.py)
            self.check_intervals()  # on the loop, as every transition's transaction
        await self.sample_guests()  # each node samples the guests it holds

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self.sample_interval)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad round must not stop the meter
                log.exception("usage metering round failed")

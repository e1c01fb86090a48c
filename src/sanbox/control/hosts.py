"""The fleet's hosts as the control plane keeps them (docs/fleet.md): one-time join tokens and
joins; and the watch that reads every joined host's report over the link and renews its lease on
the database's clock, so that a host that stops answering becomes `suspect`, then `lost`. A host
agent that restarted (a new process epoch in its report) registers again and so takes a new
epoch; a host in a new epoch is told the set it should run (host_sets.py). The computers of a
host declared lost, and back, are told so by an event each, bounded for a host that flaps
(host_flaps.py). Only one API node watches at a time (a singleton job)."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select

from ..fleet.errors import HostForgottenError
from ..fleet.hosts import (
    LOST,
    RETIRED,
    SUSPECT,
    Capacity,
    Hosts,
    HostSpec,
    Lease,
    LeasePolicy,
    Swept,
)
from ..fleet.join import Joined, join, make_token
from ..fleet.link.link import REPORT_DEADLINE, HostUnreachableError
from ..fleet.link.pki import FleetCAs, client_tls, identity_name
from ..fleet.link.remote import RemoteHost, as_host
from ..host.door import Host, Liveness
from ..store import Database
from ..store.fleet_models import HostRow
from .host_flaps import HostFlaps
from .host_sets import HostSets
from .jobs import HOSTS, Jobs

log = logging.getLogger(__name__)

MIB = 1 << 20
MOST_OVERHEAD = 1 << 40  # bytes a host's report may say a hypervisor counts (a host is not trusted)


def tunnel_of(address: str) -> tuple[str, int]:
    """A host's agent tunnel: the port after its calls' port (`host:7071` -> `host`, 7072)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port) + 1


class FleetHosts:
    def __init__(
        self, db: Database, fleet_dir: Path, jobs: Jobs, policy: LeasePolicy | None = None
    ) -> None:
        self.db = db
        self.cas = FleetCAs(fleet_dir)  # every API node of a fleet has the same (docs/fleet.md)
        self.hosts = Hosts(db, policy)
        self.links: dict[str, RemoteHost] = {}  # host name -> its link
        self._names: dict[str, str] = {}  # host id -> name, for routing a computer to its host
        self._seen: dict[str, HostRow] = {}  # host id -> its row at the last check (any state)
        self._silent: dict[str, str] = {}  # host name -> why it did not answer, last said
        # told the computers of a host that was declared lost, or came back (Computers sets it)
        self.on_change: Callable[[str, str, bool], None] = lambda _id, _name, _back: None
        self.flaps = HostFlaps()  # which losses and returns on_change is told of
        self._epochs: dict[str, str] = {}  # host name -> the agent process epoch last seen
        self.jobs = jobs
        self.sets = HostSets(db, jobs.node)
        # a host's report is waited for a third of a lease at most in a round (a slow one is
        # not renewed this round; the others were, and the sweep runs on time)
        self.answer_within = min(REPORT_DEADLINE, self.hosts.policy.ttl / 3)

    def token(self, region: str, ttl: float, host: str | None = None) -> str:
        return make_token(self.db, region, ttl, host)

    def join(self, token: str, spec: HostSpec, addresses: list[str], csr_pem: str) -> Joined:
        return join(self.db, self.cas, token, spec, addresses, csr_pem)

    def list(self) -> list[HostRow]:
        return self.hosts.all()

    def get(self, name: str) -> HostRow:
        return self.hosts.get(name)

    def drain(self, name: str, draining: bool) -> HostRow:
        """A host drained (nothing new placed on it) or undrained; it, as it is now."""
        self.hosts.drain(name, draining)
        return self.hosts.get(name)

    def forget(self, name: str) -> builtins.list[str]:
        """A lost host retired on an operator's word; the ids of the computers it held."""
        return self.hosts.forget(name)

    # routing --------------------------------------------------------------------------------

    def any_joined(self) -> bool:
        """Whether a host has joined (a create then goes to the fleet's hosts, not this one)."""
        return bool(self._names)

    def unknown_reason(self, host_id: str | None) -> str | None:
        """Why a computer's state is not known now: its host is suspect, lost or forgotten
        (None: its host answers, or it is this server's own)."""
        row = self._seen.get(host_id) if host_id else None
        if row is None or row.state not in (SUSPECT, LOST, RETIRED):
            return None
        if row.state == RETIRED:
            return f"its host {row.name} was forgotten as dead: its disk went with it"
        since = row.lease_until.strftime("%Y-%m-%d %H:%M:%S")
        return (
            f"its host {row.name} is {row.state} (no lease since {since} UTC): what its VM does "
            "now is not known until the host answers again"
        )

    def forgotten(self, host_id: str | None) -> bool:
        """Whether a computer's host was forgotten as dead: nothing of it can be reached or
        removed there (the database's word, not this node's last look)."""
        if host_id is None:
            return False
        with self.db.session() as s:
            return s.scalar(select(HostRow.state).where(HostRow.id == host_id)) == RETIRED

    def answering(self) -> set[str]:
        """The ids of the hosts this node has a link to whose report is fresh (what their state
        in the database is: the caller's to ask)."""
        return {
            host_id
            for host_id, name in self._names.items()
            if (link := self.links.get(name)) is not None and link.reachable
        }

    def liveness(self, host_id: str, computer_id: str) -> Liveness:
        """Whether a computer's VM runs on its fleet host, by the host's last report."""
        name = self._names.get(host_id)
        link = self.links.get(name) if name else None
        return Liveness.UNKNOWN if link is None else link.liveness(computer_id)

    async def liveness_now(self, host_id: str, computer_id: str) -> Liveness:
        """Whether a computer's VM runs on its fleet host, by a report read now (unknown when
        the host does not answer)."""
        name = self._names.get(host_id)
        link = self.links.get(name) if name else None
        if link is None:
            return Liveness.UNKNOWN
        try:
            await link.refresh()
        except HostUnreachableError:
            return Liveness.UNKNOWN
        return link.liveness(computer_id)

    def host(self, host_id: str) -> Host:
        """The link to the host that holds a computer; `host_unreachable` when this server has
        no link to it yet or the host stopped answering (the caller may try again);
        `host_forgotten` when it was forgotten as dead (it will never answer again)."""
        name = self._names.get(host_id)
        link = self.links.get(name) if name else None
        if link is not None and link.reachable:
            return as_host(link)
        with self.db.session() as s:  # the database's word: this node may not have looked since
            found = s.execute(select(HostRow.name, HostRow.state).where(HostRow.id == host_id))
            row = found.first()
        if row is not None and row.state == RETIRED:
            raise HostForgottenError(
                f"host {row.name} was forgotten as dead (`sanbox host forget`) and will not "
                "answer again: delete what was on it, or make it anew from a snapshot",
                row.name,
            )
        if link is None:
            raise HostUnreachableError(
                f"host {name or host_id} is not linked from this server yet: try again shortly"
            )
        raise HostUnreachableError(f"host {name} does not answer")

    def cpu_usec(self, computer_id: str, host: RemoteHost | None = None) -> int | None:
        """A computer's CPU time from the report of `host`, the one that runs it; not known,
        from the one host whose report names it (None: none does, or several: a host's report
        decides nothing of another host's computer)."""
        if host is not None:
            return host.cpu_usec(computer_id)
        found = [n for link in self.links.values() if (n := link.cpu_usec(computer_id)) is not None]
        return found[0] if len(found) == 1 else None

    # the watch ------------------------------------------------------------------------------

    async def watch(self, interval: float) -> None:
        while True:
            try:
                await self.check()
            except Exception:
                log.exception("watching the fleet's hosts failed; trying again")
            await asyncio.sleep(interval)

    async def check(self) -> Swept | None:
        """One round: read each host's report and renew its lease, then mark the silent ones.
        None when another API node holds the watch. A host is waited for a third of a lease at
        most: its settle runs in the background (host_sets.py), so no host holds back another's
        renewal, nor the sweep."""
        every = await asyncio.to_thread(self.hosts.all)
        self._seen = {r.id: r for r in every}
        rows = [r for r in every if r.state != RETIRED]
        if not rows:  # one host, no fleet: nothing to read, nothing to write
            return None
        for row in rows:  # every API node keeps a link to every host, for routing
            await self._link(row)
        self._names = {r.id: r.name for r in rows}
        if not await self.jobs.holds(HOSTS):
            return None
        await asyncio.gather(*(self._renew(row) for row in rows))
        swept = await asyncio.to_thread(self.hosts.sweep)
        for name in swept.suspect:
            log.warning("host %s missed its lease: suspect (nothing new is placed on it)", name)
        now = asyncio.get_running_loop().time()
        self.flaps.keep_only({r.id for r in rows})
        for name in swept.lost:
            host_id = next(r.id for r in rows if r.name == name)
            told = self.flaps.lost(host_id, now)
            log.error(
                "host %s is lost; its computers are unknown until it comes back%s",
                name,
                ""
                if told
                else f" (its computers' events wait: it was lost within "
                f"{self.flaps.window:g} s of its last loss they were told of)",
            )
            if told:
                self.on_change(host_id, name, False)
        for row in rows:  # lost before this round, its computers' events held back until now
            if row.state == LOST and self.flaps.still_lost(row.id, now):
                self.on_change(row.id, row.name, False)
        return swept

    async def _renew(self, row: HostRow) -> None:
        link = await self._link(row)
        try:
            async with asyncio.timeout(self.answer_within):
                report = await link.refresh()
        except (HostUnreachableError, TimeoutError) as exc:
            said = str(exc) or f"its report took over {self.answer_within:g} s"
            level = logging.INFO if self._silent.get(row.name) == said else logging.WARNING
            self._silent[row.name] = said  # a new reason is said once, loudly
            log.log(level, "host %s did not answer: %s", row.name, said)
            return
        self._silent.pop(row.name, None)
        try:
            epoch, restarted = await self._renewed(row, report)
        except Exception as exc:  # one host's report must not stop the round (nor the sweep)
            log.warning(
                "host %s: its report could not be taken, lease not renewed: %r", row.name, exc
            )
            return
        if self.sets.due(row.name, epoch, restarted):  # a new epoch, first seen, or again
            self.sets.tell(row, link, report, epoch)

    async def _renewed(self, row: HostRow, report: dict[str, Any]) -> tuple[int, bool]:
        """The host's lease renewed, or the host registered again (its agent restarted, or it
        lost its lease); the epoch it holds now, and whether its agent restarted (its report
        names another process epoch than the last this node saw)."""
        capacity, layers = capacity_of(report), [str(b["build_id"]) for b in report["builds"]]
        seen, was = str(report["epoch"]), self._epochs.get(row.name)
        self._epochs[row.name] = seen
        if was is None or was == seen:
            try:
                await asyncio.to_thread(
                    self.hosts.renew, Lease(row.id, row.epoch, row.lease_until), capacity, layers
                )
                return row.epoch, False
            except Exception as exc:  # declared lost (or re-registered by another node)
                log.warning(
                    "host %s renewed a lease it no longer held (%s): registering", row.name, exc
                )
        lease = await asyncio.to_thread(self.hosts.register, _spec(row, capacity))
        if row.state == LOST:
            log.warning("host %s answers again (epoch %d)", row.name, lease.epoch)
            if self.flaps.back(row.id):
                self.on_change(row.id, row.name, True)
        return lease.epoch, was is not None and was != seen

    async def _link(self, row: HostRow) -> RemoteHost:
        """The host's one link, made on first use and bound again when its record changes (its
        address, or a join since: its name checked, another certificate pinned)."""
        link = self.links.get(row.name)
        url, tunnel = f"https://{row.address}", tunnel_of(row.address)
        named, pinned = identity_name(row.name) if row.identity_bound else None, row.cert_sha256
        if link is not None and (link.url, link.server_name, link.pinned) == (url, named, pinned):
            return link
        tls = client_tls(self.cas.control_identity(), pinned)
        if link is not None:
            await link.rebind(url, tunnel, tls, by_identity=row.identity_bound, pinned=pinned)
            return link
        link = RemoteHost(row.name, url, tunnel, tls, by_identity=row.identity_bound, pinned=pinned)
        link.keep_reading()
        self.links[row.name] = link
        return link

    async def close(self) -> None:
        await self.sets.close()
        for link in self.links.values():
            with contextlib.suppress(Exception):
                await link.close()
        self.links.clear()


def capacity_of(report: dict[str, Any]) -> Capacity:
    """What placement may reserve on a host, from its report: the room its own admission gives
    (RAM not promised; thin disks up to its overcommit times the free space above its low
    watermark, less what its disks are promised), and what that admission counts for a new VM's
    hypervisor beside its guest's RAM (a host agent from before it said so counts none)."""
    ram = report["room"]["ram"]
    overhead = min(max(0, int(ram.get("overhead") or 0)), MOST_OVERHEAD)
    disk = report["room"]["disk"] or {"free": 0, "promised": 0}
    overcommit = float(report.get("disk_overcommit") or 1.0)  # what the host's admission allows
    usable = int(disk["free"]) - int(report.get("disk_kept_free") or 0)  # above its watermark
    return Capacity(
        vcpus=int(report.get("cpus") or 1),
        memory_mib=max(0, (int(ram["free"]) - int(ram["promised"])) // MIB),
        disk_bytes=max(0, int(usable * overcommit) - int(disk["promised"])),
        vm_overhead_mib=-(-overhead // MIB),  # rounded up, as the host counts the bytes
    )


def _spec(row: HostRow, capacity: Capacity) -> HostSpec:
    return HostSpec(
        name=row.name,
        region=row.region,
        address=row.address,
        capacity=capacity,
        hypervisor=row.hypervisor,
        accel=row.accel,
        labels=dict(row.labels),
    )

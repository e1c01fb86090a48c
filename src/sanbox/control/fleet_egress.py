"""The egress of computers on fleet hosts (docs/fleet.md, "Egress on fleet hosts"): each host's
gateway as the control plane holds it (`RemoteEgress`, one per link), and the watch that keeps
them true. Every `interval` it records the denials each host made (drained from the host's
queue) and converges each host to the records: a running computer whose egress is not running
there (the host agent restarted, or the link dropped at its start) gets it started, with its
secrets; an allowlist or binding the host does not hold yet is sent again; an egress for a
computer the records do not run there is stopped. The verbs' own calls are the fast path; this
is the path that holds when a call was lost. A failure is recorded as a `network.error` once per
kind, never once per text (said_once.py): a host that words its refusal anew every round writes
no more for it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Collection
from typing import TYPE_CHECKING

from ..fleet.errors import HostForgottenError
from ..fleet.link.egress_wire import MAX_DENIALS, handover_digest
from ..fleet.link.link import HostUnreachableError
from ..fleet.link.remote_egress import RemoteEgress
from ..host.door import (
    ConnectionBudget,
    EgressControl,
    HostError,
    Intercepts,
    OnDenied,
    OrgOf,
    Policy,
    PolicyError,
    Resolver,
)
from ..store import repo
from . import build_vms
from .errors import HostUnavailableError
from .said_once import SaidOnce
from .states import State

if TYPE_CHECKING:
    from .fleet import Fleet

log = logging.getLogger(__name__)

# the states whose egress a fleet host keeps: a paused guest's connections outlive its pause
KEPT = frozenset(
    {
        State.CREATING,
        State.STARTING,
        State.RUNNING,
        State.PAUSING,
        State.PAUSED,
        State.SUSPENDED,
        State.RESUMING,
    }
)
Records = list[tuple[str, str, list[str]]]  # a host's computers: (id, state, allow rules)
WATCH_EVERY = 2.0  # seconds: a denial on a fleet host is recorded within about this
DRAINS_PER_ROUND = 16  # batches of denials taken from one host per round
HOST_ROUND = 30.0  # seconds one host's part of a round may take (a host that holds its answer)


class FleetEgress:
    def __init__(
        self,
        fleet: Fleet,
        resolver: Resolver,
        on_denied: OnDenied,
        intercepts: Intercepts,
        budget: ConnectionBudget,
        org_of: OrgOf,
    ) -> None:
        self.fleet = fleet
        self.parts = (resolver, on_denied, intercepts, budget, org_of)
        self._held: dict[str, tuple[object, EgressControl]] = {}  # host id -> (its link, egress)
        self._said = SaidOnce()  # the failures recorded, per computer and kind
        self._loop: asyncio.AbstractEventLoop | None = None  # the watch's, once it runs
        self._wake: asyncio.Event | None = None

    def of(self, host_id: str) -> EgressControl | None:
        """The egress of fleet host `host_id`; None while it does not answer (the watch applies
        what the records say once it does)."""
        try:
            host = self.fleet.host_at(host_id)
        except (HostUnavailableError, HostForgottenError):
            return None
        held = self._held.get(host_id)
        if held is not None and held[0] is host:
            return held[1]
        resolver, on_denied, intercepts, budget, org_of = self.parts
        reach = self.fleet.reach
        # a fleet host resolves, reaches and caps with its own settings: only on_denied, intercepts
        # and org_of are the control plane's there
        egress = host.open_egress(resolver, on_denied, reach, 0, intercepts, budget, org_of)
        if egress is None:
            return None
        self._held[host_id] = (host, egress)
        return egress

    def carried(self, computer_id: str, host: object | None = None) -> int | None:
        """Bytes a fleet computer's egress carried, from the last report of `host`, the one that
        runs it; not known, from the one host whose report names it (None: none, or several)."""
        found = [
            n
            for far, egress in self._held.values()
            if host is None or far is host
            if (n := egress.carried(computer_id)) is not None
        ]
        return found[0] if len(found) == 1 else None

    async def watch(self, interval: float) -> None:
        """A round every `interval` seconds, or at once when poked (a secret or binding changed:
        a host stops injecting an unbound or rotated value within a round trip, not a round)."""
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        while True:
            self._wake.clear()
            try:
                await self.check()
            except Exception:
                log.exception("keeping the fleet hosts' egress failed; trying again")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._wake.wait()

    def poke(self) -> None:
        """Run a round now (callable from any thread)."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    async def check(self) -> None:
        """One round over every fleet host that holds computers."""
        remote = self.fleet.remote
        if remote is None or not remote.any_joined():  # one host, no fleet: nothing to read
            return
        with self.fleet.db.session() as s:
            rows = [r for r in repo.list_computers(s, None) if r.host_id is not None]
        self._said.keep_only({row.id for row in rows}, time.monotonic())  # the deleted forgotten
        by_host: dict[str, Records] = defaultdict(list)
        for row in rows:
            by_host[str(row.host_id)].append((row.id, row.state, list(row.allow)))
        builds = build_vms.running(self.fleet.db)  # their egress is their builds' to drive
        for host_id in builds:
            by_host.setdefault(host_id, [])
        rounds = (
            self._host_round(h, computers, builds.get(h, ())) for h, computers in by_host.items()
        )
        await asyncio.gather(*rounds)  # side by side: a host that is slow holds up none other

    async def _host_round(self, host_id: str, computers: Records, builds: Collection[str]) -> None:
        egress = self.of(host_id)
        if not isinstance(egress, RemoteEgress):  # none yet (a fleet host's is always one)
            return
        if not egress.has_gateway():  # its computers' starts said so (network.error)
            return
        try:
            async with asyncio.timeout(HOST_ROUND):
                await self._drain(egress, {computer_id for computer_id, _s, _a in computers})
                await self._converge(egress, computers, builds)
        except HostError as exc:
            log.info("egress of host %s: %s", host_id, exc)
        except TimeoutError:
            log.warning("egress of host %s: its round took over %g s, cut", host_id, HOST_ROUND)

    async def _drain(self, far: RemoteEgress, owned: set[str]) -> None:
        for _ in range(DRAINS_PER_ROUND):
            if not far.waiting() or await far.drain(owned) < MAX_DENIALS:
                return

    async def _converge(
        self, far: RemoteEgress, computers: Records, builds: Collection[str] = ()
    ) -> None:
        kept = {computer_id for computer_id, state, _ in computers if state in KEPT} | set(builds)
        for computer_id in far.running() - kept:
            if self.fleet.lock(computer_id).locked():
                continue
            log.info("egress of %s stopped on its host: the records do not run it", computer_id)
            try:
                await far.stop(computer_id)
            except HostError as exc:  # tried again next round
                log.warning("egress of %s was not stopped on its host: %s", computer_id, exc)
        for computer_id, state, allow in computers:
            if state != State.RUNNING or self.fleet.lock(computer_id).locked():
                continue  # a verb is at work on it: it brings the egress up or down itself
            try:
                await self._converge_one(far, computer_id, Policy.of(allow))
            except HostUnreachableError:
                raise  # the host keeps what it had until it answers: the next round sees
            except (HostError, PolicyError) as exc:  # once per kind, never per host's text
                if self._said.failed(computer_id, exc, time.monotonic()):
                    self.fleet.record(computer_id, None, "network.error", str(exc))
            else:
                self._said.worked(computer_id)

    def _now(self, computer_id: str) -> Policy | None:
        """The computer's policy as its record says now, before rules are sent: the round read
        the records when it began, and an allowlist changed since (its verb already sent the new
        rules) must not be undone by the round's older copy. None: it no longer runs, or a verb
        is at work on it."""
        row = self.fleet.by_id(computer_id)
        if row is None or row.state != State.RUNNING or self.fleet.lock(computer_id).locked():
            return None
        return Policy.of(row.allow)

    async def _converge_one(self, far: RemoteEgress, computer_id: str, policy: Policy) -> None:
        """One computer's egress on its host as the records say; HostError says what is not
        (its egress stopped where the records cannot be applied: fails closed)."""
        seen = far.seen(computer_id)
        if seen is None:
            log.info("egress of %s is not running on its host: starting it", computer_id)
            if (now := self._now(computer_id)) is None:
                return
            try:
                await far.start(computer_id, now)
            except HostUnreachableError:
                raise
            except HostError as exc:
                raise HostError(f"egress is off: {exc}") from exc
            return
        try:
            if list(seen.get("rules") or []) != policy.rules():
                now = self._now(computer_id)
                if now is not None and list(seen.get("rules") or []) != now.rules():
                    await far.update(computer_id, now)
            wanted = handover_digest(far.secrets(computer_id))
            if seen.get("secrets") != wanted:
                await far.renew_secrets(computer_id)
        except HostUnreachableError:
            raise
        except HostError as exc:  # off, not on with an allowlist or secrets the records dropped
            with contextlib.suppress(HostError):
                await far.stop(computer_id)
            raise HostError(f"egress is off: {exc}") from exc

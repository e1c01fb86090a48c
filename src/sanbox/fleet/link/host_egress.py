"""A fleet host's own egress gateway, driven by the control plane over the link (docs/fleet.md,
"Egress on fleet hosts"). The host resolves with its own upstream and counts connections in its
own budget; the control plane sends, per computer, its org, its rules and its secrets' handover
(held in memory only, forgotten when the computer's egress stops), and drains the denials the
gateway made from a bounded queue (`DenialQueue`). What the control plane reads (each computer's
rules, carried bytes, open connections, which handover it holds, how many denials wait) is in the
host's report.

The calls (`CALLS`, each with the link's operation id): `egress_start` and `egress_set_policy`
(computer id, org id, rules, secrets), `egress_update` (rules; answers the flows it closed),
`egress_secrets` (a new handover for a running egress), `egress_stop`, `egress_denials` (takes
what waits; a repeated operation id gets the same answer from the journal)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ...host.door import (
    ConnectionBudget,
    Denial,
    Handover,
    HostError,
    Policy,
    Reach,
    Resolver,
    upstream_context,
)
from ...host.egress.computers import ComputersEgress
from ...host.egress.gateway import EgressGateway
from ...host.egress.held import HeldInterception
from ...host.egress.proxy import MAX_CONNECTIONS
from ...host.egress.resolver import system_upstream
from ...host.net import Network
from ...host.net.netns import netns_exists
from ...host.settings import HostSettings
from . import egress_wire as ew

log = logging.getLogger(__name__)

MAX_QUEUED = 4096  # denials waiting for the control plane (each computer's are rate-limited)


class DenialQueue:
    """Denials waiting to be recorded by the control plane, at most `bound`: past it the oldest
    go, counted per computer, and the count is answered with the next take."""

    def __init__(self, bound: int = MAX_QUEUED) -> None:
        self.bound = bound
        self._queue: deque[tuple[str, Denial]] = deque()
        self.dropped: Counter[str] = Counter()  # computer id -> denials lost to the bound

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, computer_id: str, denial: Denial) -> None:
        self._queue.append((computer_id, denial))
        while len(self._queue) > self.bound:
            lost, _ = self._queue.popleft()
            self.dropped[lost] += 1

    def take(self, limit: int = ew.MAX_DENIALS) -> tuple[list[tuple[str, Denial]], dict[str, int]]:
        """Up to `limit` denials, oldest first, and what was dropped since the last take."""
        taken = [self._queue.popleft() for _ in range(min(limit, len(self._queue)))]
        dropped = dict(self.dropped)
        self.dropped.clear()
        return taken, dropped


class HostEgress:
    def __init__(
        self,
        network: Network,
        resolver: Resolver,
        reach: Reach | None = None,
        max_connections: int = MAX_CONNECTIONS,
        budget: ConnectionBudget | None = None,
        ca_bundle: Path | None = None,
        queue: DenialQueue | None = None,
    ) -> None:
        self.denials = queue if queue is not None else DenialQueue()  # (an empty one is falsy)
        self.upstream = upstream_context(ca_bundle)
        self._held: dict[str, HeldInterception] = {}
        self._digests: dict[str, str | None] = {}  # computer id -> the handover it holds
        self._orgs: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}  # per computer: its start or stop at a time
        self.gateway = EgressGateway(
            resolver,
            self.denials.put,
            reach,
            max_connections,
            intercepts=self._interception,
            budget=budget,
            org_of=lambda computer_id: self._orgs.get(computer_id, ""),
        )
        self.egress = ComputersEgress(self.gateway, network)

    @classmethod
    def of(cls, network: Network, settings: HostSettings) -> HostEgress:
        """The gateway `sanbox host serve` runs, from the host's settings."""
        return cls(
            network,
            Resolver.of_host(settings.upstream or system_upstream(), settings.dns_bounds),
            Reach.of(settings.tenant_private_ranges),
            settings.egress_max_connections,
            ConnectionBudget.within_open_files(
                settings.egress_max_connections_per_org, settings.egress_max_connections_total
            ),
            settings.ca_bundle,
        )

    def policy_of(self, rules: object) -> Policy:
        """The policy of rules sent over the link, checked again by this host's own reach."""
        return self.gateway.reach.policy(ew.rules_in(rules).rules())

    def _interception(self, computer_id: str) -> HeldInterception:
        held = self._held.get(computer_id)
        if held is None:  # never without the start that sets it; fail closed: nothing bound
            held = self._held[computer_id] = HeldInterception(None, self.upstream)
        return held

    def _hold(
        self, computer_id: str, org_id: str, handover: Handover | None, digest: str | None
    ) -> None:
        self._orgs[computer_id] = org_id
        self._digests[computer_id] = digest
        held = self._held.get(computer_id)
        if held is None:
            self._held[computer_id] = HeldInterception(handover, self.upstream)
        else:
            held.replace(handover)

    async def start(
        self,
        computer_id: str,
        org_id: str,
        policy: Policy,
        handover: Handover | None,
        digest: str | None = None,
        in_place: bool = False,
    ) -> None:
        """Firewall, DNS filter and proxy with the computer's secrets (`in_place`: a running
        egress gets the policy, else it starts). Nothing of it is held if it fails."""
        if not netns_exists(self.egress.network.netns(computer_id)):
            raise HostError(f"computer {computer_id} has no network namespace on this host")
        async with self._lock(computer_id):  # two API nodes' starts: one after the other
            self._hold(computer_id, org_id, handover, digest)
            try:
                if in_place:
                    await self.egress.set_policy(computer_id, policy)
                else:
                    await self.egress.start(computer_id, policy)
            except BaseException:
                await self._stop(computer_id)
                raise

    def secrets(self, computer_id: str, handover: Handover | None, digest: str | None) -> None:
        """The computer's secrets now, for a running egress (the next request sees them)."""
        if self.gateway.policy(computer_id) is None:
            raise HostError(f"computer {computer_id}'s egress does not run on this host")
        self._hold(computer_id, self._orgs.get(computer_id, ""), handover, digest)

    async def stop(self, computer_id: str) -> None:
        async with self._lock(computer_id):
            await self._stop(computer_id)
        lock = self._locks.get(computer_id)
        if lock is not None and not lock.locked():
            del self._locks[computer_id]

    def _lock(self, computer_id: str) -> asyncio.Lock:
        return self._locks.setdefault(computer_id, asyncio.Lock())

    async def _stop(self, computer_id: str) -> None:
        await self.egress.stop(computer_id)
        held = self._held.pop(computer_id, None)
        if held is not None:
            held.forget()
        self._digests.pop(computer_id, None)
        self._orgs.pop(computer_id, None)

    def report(self) -> dict[str, Any]:
        computers: dict[str, Any] = {}
        for computer_id in list(self._held):
            policy = self.gateway.policy(computer_id)
            if policy is None:
                continue
            computers[computer_id] = {
                "rules": ew.rules_out(policy),
                "carried": self.gateway.carried(computer_id),
                "open": self.gateway.open_connections(computer_id),
                "secrets": self._digests.get(computer_id),
            }
        return {"computers": computers, "denials": len(self.denials)}

    async def close(self) -> None:
        for computer_id in list(self._held):
            await self.stop(computer_id)
        await self.egress.close()


# the calls ---------------------------------------------------------------------------------

Call = Callable[[HostEgress, dict[str, Any]], Awaitable[Any]]


async def _start(egress: HostEgress, a: dict[str, Any], in_place: bool = False) -> Any:
    computer_id = ew.computer_id_in(a["computer_id"])
    policy = egress.policy_of(a["rules"])
    handover = ew.handover_in(a.get("secrets"))
    digest = ew.handover_digest(a.get("secrets"))
    await egress.start(computer_id, ew.org_id_in(a["org_id"]), policy, handover, digest, in_place)


async def _set_policy(egress: HostEgress, a: dict[str, Any]) -> Any:
    await _start(egress, a, in_place=True)


async def _update(egress: HostEgress, a: dict[str, Any]) -> Any:
    return await egress.egress.update(
        ew.computer_id_in(a["computer_id"]), egress.policy_of(a["rules"])
    )


async def _secrets(egress: HostEgress, a: dict[str, Any]) -> Any:
    handover = ew.handover_in(a.get("secrets"))
    egress.secrets(
        ew.computer_id_in(a["computer_id"]), handover, ew.handover_digest(a.get("secrets"))
    )


async def _stop(egress: HostEgress, a: dict[str, Any]) -> Any:
    await egress.stop(ew.computer_id_in(a["computer_id"]))


async def _denials(egress: HostEgress, a: dict[str, Any]) -> Any:
    taken, dropped = egress.denials.take()
    return {
        "denials": [ew.denial_out(computer_id, d) for computer_id, d in taken],
        "dropped": dropped,
    }


CALLS: dict[str, Call] = {
    "egress_start": _start,
    "egress_set_policy": _set_policy,
    "egress_update": _update,
    "egress_secrets": _secrets,
    "egress_stop": _stop,
    "egress_denials": _denials,
}

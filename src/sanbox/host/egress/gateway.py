"""The egress gateway: for each running computer, the DNS filter and the egress proxy listening
inside its namespace, and its firewall, all following one live policy (and, with `intercepts`,
the computer's bound secrets: the proxy intercepts the hosts they apply to). What they deny is
logged and reported through `on_denied` as far as the computer's `DenialLimiter` lets it: one
report per (name, port, reason) a minute and 60 a minute in all, the rest counted into the next
report. Every computer's proxy counts its connections in one `ConnectionBudget` too, per org
(`org_of` names a computer's) and in all. Each computer's DNS filter and proxy share a resolver
of their own, made from the host's (`Resolver.apart`): its cache is the computer's alone (its
names counted in one bound for the host) and forgotten when its egress stops, so the address the
proxy dials is the one the computer's own lookups gave."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...tasks import cancel_and_wait
from ..net import firewall
from ..net.listen import Endpoint, bind_in_netns
from ..net.netns import netns_exists
from .budget import ConnectionBudget
from .denials import Denial, DenialLimiter
from .dns_filter import DnsFilter
from .intercept import Interception
from .policy import Policy
from .proxy import MAX_CONNECTIONS, EgressProxy
from .reach import Reach
from .resolver import Resolver

log = logging.getLogger(__name__)
OnDenied = Callable[[str, Denial], None]  # (computer id, the denial to record)
Intercepts = Callable[[str], Interception]  # computer id -> what its proxy intercepts
OrgOf = Callable[[str], str]  # computer id -> its org's id


@dataclass
class Egress:
    computer_id: str
    netns: str
    policy: Policy
    proxy: EgressProxy
    resolver: Resolver
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)


class EgressGateway:
    def __init__(
        self,
        resolver: Resolver,
        on_denied: OnDenied | None = None,
        reach: Reach | None = None,
        max_connections: int = MAX_CONNECTIONS,
        clock: Callable[[], float] = time.monotonic,
        intercepts: Intercepts | None = None,
        budget: ConnectionBudget | None = None,
        org_of: OrgOf | None = None,
        kernel: bool = True,
    ) -> None:
        self.resolver = resolver
        self.kernel = kernel  # False: every byte through Python (the benchmark's "before")
        self.on_denied: OnDenied = on_denied or (lambda *_a: None)
        self.reach = reach or Reach()
        self.max_connections = max_connections  # per computer
        self.clock = clock
        self.intercepts = intercepts  # None: TLS is always passed through
        self.budget = budget or ConnectionBudget()  # per org and in all, for every computer
        self.org_of: OrgOf = org_of or (lambda _c: "")
        self._egress: dict[str, Egress] = {}

    def policy(self, computer_id: str) -> Policy | None:
        egress = self._egress.get(computer_id)
        return egress.policy if egress else None

    def carried(self, computer_id: str) -> int | None:
        """Bytes the computer's upstream connections carried while its egress ran (sent and
        received, counted by the kernel); None if its egress does not run here."""
        egress = self._egress.get(computer_id)
        return egress.proxy.traffic.total() if egress else None

    def open_connections(self, computer_id: str) -> int:
        """How many connections of the computer the proxy is handling now."""
        egress = self._egress.get(computer_id)
        return egress.proxy.active if egress else 0

    async def start(self, computer_id: str, netns: str, policy: Policy) -> None:
        """Firewall, DNS filter and proxy for a computer. Idempotent: if they run already (say,
        across a pause, where the guest's open connections are kept), only the policy is set."""
        current = self._egress.get(computer_id)
        if current is not None and current.netns == netns:
            await firewall.apply(netns, policy.cidrs)  # the namespace may have been recreated
            await self.update(computer_id, policy)
            return
        await self.stop(computer_id)
        await firewall.apply(netns, policy.cidrs)
        endpoints = [
            Endpoint(firewall.DNS_PORT, socket.SOCK_DGRAM),
            Endpoint(firewall.DNS_PORT, socket.SOCK_STREAM),
            Endpoint(firewall.HTTP_PORT, socket.SOCK_STREAM),
            Endpoint(firewall.TLS_PORT, socket.SOCK_STREAM),
            Endpoint(firewall.DIRECT_PORT, socket.SOCK_STREAM),
        ]
        udp, tcp, http, tls, direct = await asyncio.to_thread(bind_in_netns, netns, endpoints)

        limiter = DenialLimiter()

        def denied(name: str, port: int, reason: str) -> None:
            denial = limiter.admit(name, port, reason, self.clock())
            if denial is None:
                return
            log.info("egress of %s %s", computer_id, denial.message())
            try:
                self.on_denied(computer_id, denial)
            except Exception:
                log.exception("egress: recording a denial of %s failed", computer_id)

        def live() -> Policy:  # the live policy; nothing once the computer's egress stops
            egress = self._egress.get(computer_id)
            return egress.policy if egress is not None else Policy()

        interception = self.intercepts(computer_id) if self.intercepts is not None else None
        resolver = self.resolver.apart()
        proxy = EgressProxy(
            live,
            resolver,
            denied,
            self.reach,
            self.max_connections,
            interception=interception,
            budget=self.budget,
            org=self.org_of(computer_id),
            kernel=self.kernel,
        )
        egress = Egress(computer_id, netns, policy, proxy, resolver)
        dns = DnsFilter(
            lambda name: live().allows_host(name),
            resolver,
            lambda name, reason: denied(name, 53, reason),
            rate=self.resolver.bounds.query_rate(),
            clock=self.clock,
        )
        self._egress[computer_id] = egress
        egress.tasks.append(asyncio.ensure_future(dns.serve(udp, tcp)))
        await proxy.serve(http, tls, direct)

    async def set_policy(self, computer_id: str, netns: str, policy: Policy) -> None:
        """`policy` for a computer whose egress may already run in `netns` (a warm pool's
        computer at its claim): updated in place if it does and the namespace is still there
        (no firewall change unless its cidr rules differ), else started (which fails loudly if
        the namespace is gone)."""
        current = self._egress.get(computer_id)
        if current is not None and current.netns == netns and netns_exists(netns):
            await self.update(computer_id, policy)
            return
        await self.start(computer_id, netns, policy)

    async def update(self, computer_id: str, policy: Policy) -> int:
        """Apply a new policy at once; returns how many open flows it closed."""
        egress = self._egress.get(computer_id)
        if egress is None:
            return 0
        if policy.cidrs != egress.policy.cidrs:
            await firewall.apply(egress.netns, policy.cidrs)
        egress.policy = policy
        return len(egress.proxy.revalidate())

    async def stop(self, computer_id: str) -> None:
        egress = self._egress.pop(computer_id, None)
        if egress is None:
            return
        await egress.proxy.close()
        for task in egress.tasks:
            await cancel_and_wait(task, (Exception,))
        egress.resolver.forget()

    async def close(self) -> None:
        for computer_id in list(self._egress):
            await self.stop(computer_id)

"""A fleet host's egress as the control plane drives it (`EgressControl`): each verb a call over
the link (host_egress.py serves them), each read from the host's latest report. A start sends the
computer's org, rules and secrets' handover (`Interception.handover`: unsealed here, carried
over the link's mutual TLS only); `drain` records the denials the host made through `on_denied`,
and says the count of those the host's queue had to drop."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection
from typing import Any, Protocol

from ...host.door import Denial, HostError, Intercepts, OnDenied, OrgOf, Policy
from . import egress_wire as ew
from . import wire

log = logging.getLogger(__name__)


class Link(Protocol):
    name: str

    async def call(self, name: str, **args: Any) -> Any: ...

    def reported(self) -> dict[str, Any] | None: ...


class RemoteEgress:
    def __init__(self, link: Link, on_denied: OnDenied, intercepts: Intercepts, org_of: OrgOf):
        self.link = link
        self.on_denied = on_denied
        self.intercepts = intercepts
        self.org_of = org_of

    def secrets(self, computer_id: str) -> ew.Json | None:
        """The computer's handover as it crosses (HostError if it cannot be made: its egress then
        does not start, never without its secrets). The error names no value."""
        try:
            handover = self.intercepts(computer_id).handover()
        except Exception as exc:
            raise HostError(
                f"the secrets bound to {computer_id} could not be handed to host "
                f"{self.link.name} ({type(exc).__name__}): its egress stays off"
            ) from None
        if handover is not None and len(handover.injections) > ew.MAX_INJECTIONS:
            raise HostError(
                f"{len(handover.injections)} secrets are bound to {computer_id}; a fleet host is "
                f"handed at most {ew.MAX_INJECTIONS}: unbind some, its egress stays off"
            )
        return ew.handover_out(handover)

    async def _secrets_or_off(self, computer_id: str) -> ew.Json | None:
        """The computer's handover; if it cannot be made, its egress on the host is stopped
        first (fails closed: never on with the secrets it had, or none), then HostError."""
        try:
            return self.secrets(computer_id)
        except HostError:
            with contextlib.suppress(HostError):
                await self.stop(computer_id)
            raise

    async def _starting(self, computer_id: str, policy: Policy) -> dict[str, Any]:
        return {
            "computer_id": computer_id,
            "org_id": self.org_of(computer_id),
            "rules": ew.rules_out(policy),
            "secrets": await self._secrets_or_off(computer_id),
        }

    async def start(self, computer_id: str, policy: Policy) -> None:
        await self.link.call("egress_start", **await self._starting(computer_id, policy))

    async def set_policy(self, computer_id: str, policy: Policy) -> None:
        await self.link.call("egress_set_policy", **await self._starting(computer_id, policy))

    async def update(self, computer_id: str, policy: Policy) -> int:
        rules = ew.rules_out(policy)
        return int(await self.link.call("egress_update", computer_id=computer_id, rules=rules))

    async def renew_secrets(self, computer_id: str) -> None:
        """The secrets bound now, for a computer whose egress runs on the host."""
        wired = await self._secrets_or_off(computer_id)
        await self.link.call("egress_secrets", computer_id=computer_id, secrets=wired)

    async def stop(self, computer_id: str) -> None:
        await self.link.call("egress_stop", computer_id=computer_id)

    # reads: the host's latest report ----------------------------------------------------------

    def seen(self, computer_id: str) -> dict[str, Any] | None:
        """The computer's egress as the host last reported it (None: not running there, or the
        host has not reported)."""
        egress = (self.link.reported() or {}).get("egress") or {}
        found = egress.get("computers", {}).get(computer_id)
        return found if isinstance(found, dict) else None

    def has_gateway(self) -> bool:
        """Whether the host runs an egress gateway (one that makes no network has none)."""
        return (self.link.reported() or {}).get("egress") is not None

    def running(self) -> set[str]:
        egress = (self.link.reported() or {}).get("egress") or {}
        return set(egress.get("computers", {}))

    def policy(self, computer_id: str) -> Policy | None:
        seen = self.seen(computer_id)
        return None if seen is None else ew.rules_in(seen["rules"])

    def carried(self, computer_id: str) -> int | None:
        seen = self.seen(computer_id)
        return None if seen is None else wire.count(seen.get("carried"))

    def open_connections(self, computer_id: str) -> int:
        seen = self.seen(computer_id)
        return (wire.count(seen.get("open")) or 0) if seen is not None else 0

    def holds_secrets(self, computer_id: str) -> str | None:
        """The digest of the handover the host holds for the computer."""
        seen = self.seen(computer_id)
        return None if seen is None else seen.get("secrets")

    async def close(self) -> None:
        """Nothing to close here: the host's gateway is the host's (it stops with its agent)."""

    # denials ------------------------------------------------------------------------------------

    def waiting(self) -> int:
        egress = (self.link.reported() or {}).get("egress") or {}
        return int(egress.get("denials") or 0)

    async def drain(self, owned: Collection[str] | None = None) -> int:
        """Record what the host denied since the last drain (a batch at a time, taken from the
        host: a repeated operation id gets the same batch, so none is recorded twice); how many
        were recorded. With `owned`, a denial the host names for a computer it does not hold
        is dropped and logged (a host speaks for its own computers only)."""
        answer = await self.link.call("egress_denials")
        answer = answer if isinstance(answer, dict) else {}
        denials, dropped = answer.get("denials"), answer.get("dropped")
        recorded = 0
        for item in denials[: ew.MAX_DENIALS] if isinstance(denials, list) else []:
            try:
                computer_id, denial = ew.denial_in(item)
            except ValueError as exc:
                log.warning("host %s sent a denial that is not one: %s", self.link.name, exc)
                continue
            if self._own(computer_id, owned):
                self._record(computer_id, denial)
                recorded += 1
        for computer_id, count in dropped.items() if isinstance(dropped, dict) else []:
            valid = isinstance(count, int) and 0 < count < 1 << 31
            if valid and self._own(computer_id, owned):
                reason = f"host {self.link.name}'s queue of denials was full"
                self._record(computer_id, Denial("*", 0, reason, others=count))
        return recorded

    def _own(self, computer_id: str, owned: Collection[str] | None) -> bool:
        if owned is None or computer_id in owned:
            return True
        said = "host %s named a denial of %r, not its own: dropped"
        log.warning(said, self.link.name, computer_id[:64])
        return False

    def _record(self, computer_id: str, denial: Denial) -> None:
        try:
            self.on_denied(computer_id, denial)
        except Exception:
            log.exception(
                "recording a denial of %s from host %s failed", computer_id, self.link.name
            )

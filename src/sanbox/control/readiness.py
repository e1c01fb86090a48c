"""Waiting for a template's readiness check (`[ready]` in its spec: a port that answers, or a
command that succeeds) in one of its computers: before its ready snapshot is taken (`wait`), and
in every computer made of it, created, restored, claimed or forked, before that computer answers
`running` (`settle`): the first request an agent sends it is served.

A check that does not answer in time, or an agent that restarts meanwhile, is a "not yet", never
a failure of the build: only the wait running out is, and its reason says how long it waited,
for what, and what the last check said. The log says every few seconds how the wait goes. In a
software-emulated guest the wait is longer than the spec says (its timeouts are written for
hardware virtualisation, and an emulated guest on a loaded host runs several times slower)."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import TYPE_CHECKING, Protocol

from ..host.door import AgentClient, AgentError, AgentTimeoutError
from ..templates.spec import Ready, SpecError, parse
from . import template_lookup

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..host.door import Machine
    from ..store.models import ComputerRow
    from .fleet import Fleet

EMULATION_FACTOR = 4  # a wait is this much longer in a software-emulated guest
PROBE_TIMEOUT = 60.0  # one command check may take this long before it counts as a no
PROGRESS_EVERY = 15.0  # seconds between "still waiting" lines in the log
RETRY_EVERY = 0.5  # seconds between checks
SETTLE_LIMIT = 180.0  # a new computer's wait, at most (its template was ready when it was saved)


class NotReadyError(Exception):
    """The wait ran out: the message says for what, how long, and the last check's answer."""


class Log(Protocol):
    def output(self, line: str) -> None: ...


class Guest(Protocol):
    """What the wait needs of a computer (a `Machine`)."""

    @property
    def isolation(self) -> str: ...

    async def client(self, timeout: float = 10.0) -> AgentClient: ...


def slowdown(isolation: str) -> int:
    """How much longer than the spec says a wait is in a guest of this isolation."""
    return EMULATION_FACTOR if isolation.endswith("-tcg") else 1


def describe(ready: Ready) -> str:
    return (
        f"port {ready.port} to answer"
        if ready.port is not None
        else f"`{ready.command}` to succeed"
    )


async def wait(guest: Guest, ready: Ready, log: Log) -> None:
    """Until the check passes; NotReadyError once `ready.timeout` (scaled) has run out."""
    what = describe(ready)
    factor = slowdown(guest.isolation)
    limit = ready.timeout * factor
    if factor > 1:
        log.output(
            f"[sanbox] waiting up to {limit:.0f}s for {what} ({ready.timeout:.0f}s x {factor}: "
            "the guest runs under software emulation)"
        )
    t0 = time.monotonic()
    report = t0 + PROGRESS_EVERY
    while True:
        said = await probe(guest, ready)
        now = time.monotonic()
        if said is None:
            log.output(f"[sanbox] ready after {now - t0:.0f}s: {what}")
            return
        if now - t0 > limit:
            raise NotReadyError(
                f"never ready: waited {limit:.0f}s for {what} in a computer of it; the last "
                f"check said: {said} (see its services' logs in /var/log/sanbox/services/ "
                "in a computer of it)"
            )
        if now >= report:
            log.output(
                f"[sanbox] still waiting for {what} ({now - t0:.0f}s of {limit:.0f}s): {said}"
            )
            report = now + PROGRESS_EVERY
        await asyncio.sleep(RETRY_EVERY)


async def probe(guest: Guest, ready: Ready) -> str | None:
    """One check: None if it passed, else what it said. A port passes once the guest's kernel
    lists a listener a dial would reach (as good as a dial: the kernel completes it, and the
    service is not woken to accept, read nothing and close while the first command runs); one not
    seen so is dialled by the agent itself (no process to start in the guest), whose answer
    counts."""
    try:
        client = await guest.client()
        if ready.port is not None:
            if not await client.listening(ready.port):
                stream = await client.tcp(ready.port)
                await stream.close()
            return None
        r = await client.exec(
            ["/bin/sh", "-c", ready.command or "true"], timeout=PROBE_TIMEOUT, max_output=4096
        )
    except AgentTimeoutError:
        return f"the check did not answer in {PROBE_TIMEOUT:.0f}s"
    except AgentError as exc:
        return str(exc) or type(exc).__name__
    if r.timed_out:
        return f"the check ran over {PROBE_TIMEOUT:.0f}s"
    if r.exit_code == 0:
        return None
    out = (r.stderr or r.stdout).decode(errors="replace").strip().splitlines()
    return f"exit code {r.exit_code}" + (f": {out[-1][-200:]}" if out else "")


def check_of(fleet: Fleet, org_id: str, template: str, region: str | None) -> Ready | None:
    """The readiness check of the org's template `template` as built in `region` (None: this
    server's own host); None for a built-in one or a spec without `[ready]`."""
    row = template_lookup.built_as(fleet, org_id, template, region)
    return None if row is None else _ready_in(row.digest, row.spec)


@functools.lru_cache(maxsize=256)
def _ready_in(digest: str, spec: str) -> Ready | None:
    try:
        return parse(spec).ready
    except SpecError:  # it was built from it: it parsed then
        return None


async def settle(guest: Guest, ready: Ready | None) -> str | None:
    """Wait until `ready` passes in a computer just made of its template (its check's timeout,
    scaled for emulation, at most SETTLE_LIMIT). None once it passed (or there is no check);
    else why the computer is not ready: what it waited for, how long, and the last answer."""
    if ready is None:
        return None
    limit = min(ready.timeout * slowdown(guest.isolation), SETTLE_LIMIT)
    t0 = time.monotonic()
    while (said := await probe(guest, ready)) is not None:
        if time.monotonic() - t0 > limit:
            return f"waited {limit:.0f}s for {describe(ready)}; the last check said: {said}"
        await asyncio.sleep(RETRY_EVERY)
    return None


async def settle_computer(fleet: Fleet, row: ComputerRow, guest: Guest) -> str | None:
    """`settle` a computer just made (its org's template's check)."""
    return await settle(guest, check_of(fleet, row.org_id, row.template, row.region))


async def came_up_settled(
    fleet: Fleet, made: Sequence[tuple[ComputerRow, Machine]]
) -> list[str | None]:
    """`fleet.came_up` for each computer just made (its network, its secrets' CA), each
    settled meanwhile (its check only reads the guest: its round trips overlap the host's
    steps); what `settle` said of each."""
    settling = asyncio.gather(*(settle_computer(fleet, row, m) for row, m in made))
    try:
        await asyncio.gather(*(fleet.came_up(row.id, m) for row, m in made))
    except BaseException:
        settling.cancel()
        settling.add_done_callback(lambda t: t.cancelled() or t.exception())
        raise
    return list(await settling)


def not_ready(fleet: Fleet, computer_id: str, why: str) -> None:
    """Say that a computer runs but its template's check has not passed (it answered running:
    it is there, and its services may still come up)."""
    said = f"running, but its template's readiness check has not passed: {why}"
    fleet.record(computer_id, None, "computer.not_ready", said, {"reason": why})

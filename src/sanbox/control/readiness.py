"""Waiting for a template's readiness check (`[ready]` in its spec: a port that answers, or a
command that succeeds) in one of its computers, before its ready snapshot is taken.

A check that does not answer in time, or an agent that restarts meanwhile, is a "not yet", never
a failure of the build: only the wait running out is, and its reason says how long it waited,
for what, and what the last check said. The log says every few seconds how the wait goes. In a
software-emulated guest the wait is longer than the spec says (its timeouts are written for
hardware virtualisation, and an emulated guest on a loaded host runs several times slower)."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from ..host.door import AgentClient, AgentError, AgentTimeoutError
from ..templates.spec import Ready

EMULATION_FACTOR = 4  # a wait is this much longer in a software-emulated guest
PROBE_TIMEOUT = 60.0  # one command check may take this long before it counts as a no
PROGRESS_EVERY = 15.0  # seconds between "still waiting" lines in the log
RETRY_EVERY = 0.5  # seconds between checks


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
    """One check: None if it passed, else what it said. A port is dialled by the agent itself
    (no process to start in the guest)."""
    try:
        client = await guest.client()
        if ready.port is not None:
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

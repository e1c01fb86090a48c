"""One process E2B's SDK started (`Running`): its events handed to the streams watching it, as
envd's event messages (proto3 JSON), and its end as envd says it (`end_event`). `processes.py`
keeps them, by computer."""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ..control.guest import ExecProcess, Exit, PtySession, Stderr, Stdout
from ..store.models import Org
from .budgets import Event, EventQueue
from .connect import ConnectError
from .signal_names import go_name
from .start_deadline import StartDeadline

log = logging.getLogger(__name__)

MAX_WATCHERS = 16  # streams watching one process at once


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def end_event(
    exit_code: int, signal: int | None = None, error: str | None = None, core_dumped: bool = False
) -> Event:
    """envd's end event, as Go's `os.ProcessState` says it: a process ended by a signal did not
    exit (`exitCode` -1, `status` and `error` "signal: killed", "signal: power failure": every
    signal by Go's name, `signal_names.py`, and " (core dumped)" after it when it dumped core);
    one that exited non-zero has `error` "exit status N" (`exec.ExitError`)."""
    if signal:
        status = f"signal: {go_name(signal)}" + (" (core dumped)" if core_dumped else "")
        end: dict[str, Any] = {"exitCode": -1, "status": status, "error": error or status}
        return {"end": end}
    status = f"exit status {exit_code}"
    end = {"exited": True, "status": status}
    if exit_code:
        end["exitCode"] = exit_code
        end["error"] = error or status
    return {"end": end}


@dataclass
class Running:
    computer_id: str
    org: Org
    config: dict[str, Any]  # ProcessConfig as the SDK sent it: cmd, args, envs, cwd
    tag: str | None
    pid: int
    pty: bool
    proc: ExecProcess | PtySession | None  # None while detached
    kept: bool = False
    watchers: set[EventQueue] = field(default_factory=set)
    delivered: dict[int, int] = field(default_factory=dict)  # bytes published, by channel
    ended: Event | None = None
    unread: bool = False  # it ended with no stream watching: a `connect` may still read its end
    finished: bool = False  # it exited in the guest while detached: attached by a `connect`
    deadline: StartDeadline | None = None  # its Start's `Connect-Timeout-Ms`, if any
    overdue: bool = False  # its deadline passed: killed (when next attached, if detached then)

    @property
    def listed(self) -> bool:
        return self.ended is None and not self.finished

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"config": self.config, "pid": self.pid}
        if self.tag is not None:
            out["tag"] = self.tag
        return out

    async def _publish(self, event: Event | None) -> None:
        for queue in list(self.watchers):
            await queue.put(event)

    async def _output(self, channel: int, data: bytes) -> None:
        self.delivered[channel] = self.delivered.get(channel, 0) + len(data)
        name = "pty" if self.pty else ("stderr" if channel == 2 else "stdout")
        await self._publish({"data": {name: _b64(data)}})

    async def pump(self, proc: ExecProcess | PtySession) -> bool:
        """The process's events to its watchers until it exits (True) or, for a kept process,
        until the agent connection ends (False: detached, it runs on in the guest)."""
        ended: Event | None = None
        try:
            if isinstance(proc, PtySession):
                while chunk := await proc.read():
                    await self._output(1, chunk)
                if proc.exit is not None:
                    exit_ = proc.exit
                    ended = end_event(exit_.exit_code, exit_.signal, None, exit_.core_dumped)
            else:
                async for ev in proc.events():
                    if isinstance(ev, Stdout | Stderr):
                        await self._output(2 if isinstance(ev, Stderr) else 1, ev.data)
                    elif isinstance(ev, Exit):
                        ended = end_event(ev.exit_code, ev.signal, None, ev.core_dumped)
        except Exception as exc:  # the agent connection or the VM went away
            log.info("process %s in %s lost its stream: %s", self.pid, self.computer_id, exc)
        if ended is None and self.kept:
            return False
        await self.end(ended or end_event(-1, None, "the sandbox stopped or its agent went away"))
        return True

    async def end(self, event: Event) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        if self.ended is None:
            self.ended = event
            self.unread = not self.watchers
            await self._publish(event)
            await self._publish(None)

    async def said_lost(self, lost: dict[int, int]) -> None:
        for channel, count in sorted(lost.items()):
            note = f"[sanbox: {count} bytes of output were dropped while no one was attached]\n"
            await self._publish({"data": {"pty" if self.pty else "stderr": _b64(note.encode())}})
            self.delivered[channel] = self.delivered.get(channel, 0) + count

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncIterator[EventQueue]:
        """A queue of this process's events from now on (None after its end)."""
        queue = EventQueue()
        if self.ended is not None:
            queue.put_nowait(self.ended)
            queue.put_nowait(None)
        elif len(self.watchers) >= MAX_WATCHERS:
            raise ConnectError(
                "resource_exhausted",
                f"{MAX_WATCHERS} streams watch process {self.pid} already, the most at once: "
                "close one, then connect again",
            )
        else:
            self.watchers.add(queue)
        try:
            yield queue
        finally:
            self.watchers.discard(queue)

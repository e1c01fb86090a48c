"""The processes E2B's SDK started in each computer, kept past the request that started them.

envd's processes outlive their stream: `commands.run(background=True)` returns while the command
runs, and later calls find it by pid (send stdin, signal, connect, list, resize a PTY). A
`Running` holds the guest agent's exec or PTY session in a task of its own and hands each event
to the streams watching it (`watch()`), as envd's event messages (proto3 JSON). With no stream
watching, output is dropped, as envd does; the process runs until it exits or is killed.

Bounds: `MAX_PER_COMPUTER` processes per computer, `QUEUE` events queued per watching stream
(a slow stream slows the process's output, never the server's memory)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ..control.guest import ExecProcess, Exit, PtySession, Stderr, Stdout
from .connect import ConnectError

log = logging.getLogger(__name__)

MAX_PER_COMPUTER = 64
QUEUE = 64

Event = dict[str, Any]  # a ProcessEvent, `{"start": …}`, `{"data": …}` or `{"end": …}`


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def end_event(exit_code: int, signal: int | None = None, error: str | None = None) -> Event:
    status = f"signal: {signal}" if signal else f"exit status {exit_code}"
    end: dict[str, Any] = {"exited": True, "status": status}
    if exit_code:
        end["exitCode"] = exit_code
    if error:
        end["error"] = error
    return {"end": end}


@dataclass
class Running:
    computer_id: str
    config: dict[str, Any]  # ProcessConfig as the SDK sent it: cmd, args, envs, cwd
    tag: str | None
    proc: ExecProcess | PtySession
    watchers: set[asyncio.Queue[Event | None]] = field(default_factory=set)
    task: asyncio.Task[None] | None = None
    ended: Event | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"config": self.config, "pid": self.pid}
        if self.tag is not None:
            out["tag"] = self.tag
        return out

    async def _publish(self, event: Event | None) -> None:
        for queue in list(self.watchers):
            await queue.put(event)

    async def pump(self) -> None:
        """The process's events to its watchers, until it exits."""
        try:
            if isinstance(self.proc, PtySession):
                while chunk := await self.proc.read():
                    await self._publish({"data": {"pty": _b64(chunk)}})
                code = self.proc.exit.exit_code if self.proc.exit is not None else -1
                signal = self.proc.exit.signal if self.proc.exit is not None else None
                self.ended = end_event(code, signal)
            else:
                async for ev in self.proc.events():
                    if isinstance(ev, Stdout):
                        await self._publish({"data": {"stdout": _b64(ev.data)}})
                    elif isinstance(ev, Stderr):
                        await self._publish({"data": {"stderr": _b64(ev.data)}})
                    elif isinstance(ev, Exit):
                        self.ended = end_event(ev.exit_code, ev.signal)
        except Exception as exc:  # the agent or the VM went away: the process is over
            log.info(
                "process %s in %s ended without its status: %s", self.pid, self.computer_id, exc
            )
            self.ended = end_event(-1, None, "the sandbox stopped or its agent went away")
        if self.ended is None:
            self.ended = end_event(-1, None, "the process ended without an exit status")
        await self._publish(self.ended)
        await self._publish(None)

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncIterator[asyncio.Queue[Event | None]]:
        """A queue of this process's events from now on (None after its end)."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue(QUEUE)
        if self.ended is not None:
            queue.put_nowait(self.ended)
            queue.put_nowait(None)
        else:
            self.watchers.add(queue)
        try:
            yield queue
        finally:
            self.watchers.discard(queue)


class ProcessTable:
    """Every computer's running E2B processes, by pid."""

    def __init__(self) -> None:
        self._by_computer: dict[str, dict[int, Running]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def of(self, computer_id: str) -> list[Running]:
        return list(self._by_computer.get(computer_id, {}).values())

    def find(self, computer_id: str, selector: dict[str, Any]) -> Running:
        procs = self._by_computer.get(computer_id, {})
        if "pid" in selector:
            try:
                found = procs.get(int(selector["pid"]))
            except (TypeError, ValueError):
                found = None
        else:
            found = next((r for r in procs.values() if r.tag == selector.get("tag")), None)
        if found is None or found.ended is not None:
            raise ConnectError("not_found", f"process with {selector} not found")
        return found

    def room(self, computer_id: str) -> None:
        if len(self._by_computer.get(computer_id, {})) >= MAX_PER_COMPUTER:
            raise ConnectError(
                "resource_exhausted",
                f"at most {MAX_PER_COMPUTER} processes started through the SDK run at once",
            )

    async def start(
        self,
        computer_id: str,
        session: contextlib.AbstractAsyncContextManager[ExecProcess | PtySession],
        config: dict[str, Any],
        tag: str | None,
        stdin: bool,
    ) -> tuple[Running, asyncio.Queue[Event | None]]:
        """Enter `session` in a task of its own; the process and a queue already watching it."""
        self.room(computer_id)
        ready: asyncio.Future[tuple[Running, asyncio.Queue[Event | None]]] = (
            asyncio.get_running_loop().create_future()
        )

        async def own() -> None:
            try:
                async with session as proc:
                    running = Running(computer_id, config, tag, proc)
                    queue: asyncio.Queue[Event | None] = asyncio.Queue(QUEUE)
                    running.watchers.add(queue)
                    self._by_computer.setdefault(computer_id, {})[proc.pid] = running
                    try:
                        if isinstance(proc, ExecProcess) and not stdin:
                            await proc.close_stdin()
                        ready.set_result((running, queue))
                        await running.pump()
                    finally:
                        procs = self._by_computer.get(computer_id, {})
                        procs.pop(proc.pid, None)
                        if not procs:
                            self._by_computer.pop(computer_id, None)
            except asyncio.CancelledError:
                if not ready.done():
                    ready.cancel()
                raise
            except Exception as exc:
                if not ready.done():
                    ready.set_exception(exc)
                else:
                    log.info("a process session in %s ended with %r", computer_id, exc)

        task = asyncio.get_running_loop().create_task(own())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return await ready

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

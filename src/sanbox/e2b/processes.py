"""The processes E2B's SDK started in each computer, kept past the request that started them and
past the agent connection.

envd's processes outlive their stream: `commands.run(background=True)` returns while the command
runs, and later calls find it by pid (send stdin, signal, connect, list, resize a PTY). A
`Running` reads the guest agent's exec or PTY session in a task of its own and hands each event
to the streams watching it (`watch()`), as envd's event messages (proto3 JSON). With no stream
watching, output is dropped, as envd does; the process runs until it exits or is killed.

Every process is started *kept* in the guest (guest/keeper.py; an agent too old to keep them
runs them as before): when the agent connection ends (a pause, a server's reconnect) the process
runs on in the guest, its output held there, and its `Running` stays, detached, with its
watchers. The next call about that computer's processes re-attaches it, and so do the
computer's resume or, after a reconnect, the server itself when a stream still watches it: output
from the last byte delivered, then live output and the exit code. Bytes the guest could no
longer hold are said on the process's stderr (the terminal for a PTY). Processes kept in a
guest that this server did not start (before a restart) are adopted the same way.

Bounds: `MAX_PER_COMPUTER` processes per computer (a slot taken before the guest is asked, so
starts at once cannot all pass), `MAX_WATCHERS` streams watching one process (its Start's and its
Connects'; each holds an open request of its sandbox's too, `api/open_requests.py`),
`budgets.QUEUE` events and `budgets.QUEUE_BYTES` bytes queued per watching stream (a slow stream
slows the process's output, never grows the server's memory).

A Start's deadline (`Connect-Timeout-Ms`, the SDK's `timeout`) kills its process with SIGKILL, as
envd does, counted while the sandbox runs (`start_deadline.py`: envd counts it on the guest's
clock, which a pause stops), so it is held from a pause's start (`held`, or when its process
detaches from a sandbox at rest) to the resume (`released`, or its next attach). One that passes
while the process is detached from a running sandbox (the server's connection to the agent
ended) kills it when it is next attached. The deadline lives in this server: a process adopted
after a restart has none."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal as signals
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..control.computers import Computers
from ..control.errors import ControlError
from ..control.guest import ExecProcess, KeptInfo, PtySession
from ..store.models import Org
from .budgets import EventQueue, Reservations
from .connect import ConnectError
from .running import MAX_WATCHERS as MAX_WATCHERS
from .running import Running, end_event
from .start_deadline import StartDeadline

log = logging.getLogger(__name__)

MAX_PER_COMPUTER = 64

Session = contextlib.AbstractAsyncContextManager[ExecProcess | PtySession]


def _adopted(computer_id: str, org: Org, info: KeptInfo) -> Running:
    """A process kept in the guest that this server did not start (it restarted since)."""
    config = {"cmd": info.cmd, "args": [], "envs": {}}
    return Running(computer_id, org, config, info.tag, info.pid, info.kind == "pty", None, True)


class ProcessTable:
    """Every computer's E2B processes, by pid."""

    def __init__(self, plane: Computers, standing: Callable[[str], str]) -> None:
        self._plane = plane
        self._standing = standing  # a computer's "running", "held" (paused...) or "gone"
        self._by_computer: dict[str, dict[int, Running]] = {}
        self._synced: set[str] = set()  # computers whose guest's kept list was read
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._starting = Reservations()  # starts awaiting the guest, by computer

    def of(self, computer_id: str) -> list[Running]:
        return list(self._by_computer.get(computer_id, {}).values())

    def find(self, computer_id: str, selector: dict[str, Any], *, ended: bool = False) -> Running:
        """The process `selector` names; one that ended unread only when `ended` (to read it)."""
        procs = self._by_computer.get(computer_id, {})
        if "pid" in selector:
            try:
                found = procs.get(int(selector["pid"]))
            except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity
                found = None
        else:
            found = next((r for r in procs.values() if r.tag == selector.get("tag")), None)
        if found is None or (not found.listed and not (ended and (found.unread or found.finished))):
            raise ConnectError("not_found", f"process with {selector} not found")
        return found

    def room(self, computer_id: str) -> None:
        running = sum(r.listed for r in self.of(computer_id))
        if running + self._starting.count(computer_id) >= MAX_PER_COMPUTER:
            raise ConnectError(
                "resource_exhausted",
                f"at most {MAX_PER_COMPUTER} processes started through the SDK run at once",
            )

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(
        self, session: Session, ready: asyncio.Future[Running], make: Callable[..., Running]
    ) -> None:
        """Enter `session` (a start or an attach), register and pump the process until it ends
        or detaches. `make(proc)` is the process's `Running` (new, or the detached one)."""
        try:
            async with session as proc:
                running = make(proc)
                running.proc = proc
                self._by_computer.setdefault(running.computer_id, {})[running.pid] = running
                if not ready.done():  # done: the server is closing; pumped all the same
                    ready.set_result(running)
                if running.deadline is not None:  # attached: its sandbox runs
                    running.deadline.release()
                if running.overdue:  # its deadline passed while it was detached
                    self._spawn(self._kill(running))
                if await running.pump(proc):
                    self._ended(running)
                    if running.kept:
                        await self._forget(running)
                else:
                    running.proc = None
                    standing = self._standing(running.computer_id)
                    if standing == "held" and running.deadline is not None:
                        running.deadline.hold()  # a pause this server's events did not say
                    if standing == "gone":
                        await self.gone(running.computer_id)
                    elif standing == "running" and running.watchers:  # a reconnect, not a pause
                        self.resync(running.computer_id)
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.info("a process session ended with %r", exc)

    def _ended(self, running: Running) -> None:
        """An ended process leaves the table, unless no one read its end: then it stays (the
        newest `MAX_PER_COMPUTER` such) for a `connect` to read."""
        if not running.unread:
            self._remove(running)
            return
        unread = [r for r in self.of(running.computer_id) if r.ended is not None and r.unread]
        for old in unread[: max(0, len(unread) - MAX_PER_COMPUTER)]:
            self._remove(old)

    def discard(self, running: Running) -> None:
        """A `connect` read the end of a process that had ended unread."""
        if running.ended is not None:
            self._remove(running)

    def _remove(self, running: Running) -> None:
        procs = self._by_computer.get(running.computer_id, {})
        if procs.get(running.pid) is running:
            del procs[running.pid]
        if not procs:
            self._by_computer.pop(running.computer_id, None)

    async def _forget(self, running: Running) -> None:
        """The exit was read: the guest may drop the process's record."""
        with contextlib.suppress(ControlError):
            async with self._plane.kept(running.org, running.computer_id) as kept:
                await kept.forget(running.pid)

    async def start(
        self,
        computer_id: str,
        org: Org,
        session: Session,
        config: dict[str, Any],
        tag: str | None,
        stdin: bool,
        pty: bool,
        timeout: float | None = None,
    ) -> tuple[Running, EventQueue]:
        """Enter `session` in a task of its own; the process and a queue already watching it.
        Its slot is held from the check until it is registered (or failed), even if the caller
        leaves first (its client gone): the process is then registered and pumped all the same,
        watched by no one, its end kept for a `connect` to read. With `timeout` (seconds) the
        process is killed (SIGKILL) that long after it started, as envd kills one at its Start's
        deadline, whether or not a stream still watches it."""
        self.room(computer_id)
        ready: asyncio.Future[Running] = asyncio.get_running_loop().create_future()
        queue = EventQueue()
        left = False  # the caller stopped waiting: its queue watches nothing

        def make(proc: ExecProcess | PtySession) -> Running:
            running = Running(computer_id, org, config, tag, proc.pid, pty, proc, proc.kept)
            if not left:
                running.watchers.add(queue)
            if timeout is not None:
                running.deadline = StartDeadline(timeout, lambda: self._overdue(running))
            return running

        @contextlib.asynccontextmanager
        async def started() -> AsyncIterator[ExecProcess | PtySession]:
            async with session as proc:
                if isinstance(proc, ExecProcess) and not stdin:
                    await proc.close_stdin()
                yield proc

        reserved = contextlib.ExitStack()  # until it is registered, or failed
        reserved.enter_context(self._starting.held(computer_id))
        ready.add_done_callback(lambda _: reserved.close())
        self._spawn(self._serve(started(), ready, make))
        try:
            return await asyncio.shield(ready), queue
        except asyncio.CancelledError:
            left = True
            if not ready.done():  # a start that fails now fails unread: its error retrieved
                ready.add_done_callback(lambda f: f.cancelled() or f.exception())
            elif not ready.cancelled() and ready.exception() is None:
                ready.result().watchers.discard(queue)  # registered as the caller left
            raise

    def _overdue(self, running: Running) -> None:
        """Its deadline passed: kill it now, or (detached) once re-attached."""
        running.deadline = None
        if running.ended is None:
            running.overdue = True
            if running.proc is not None:
                self._spawn(self._kill(running))

    async def _kill(self, running: Running) -> None:
        proc = running.proc
        if proc is None or running.ended is not None:
            return
        try:
            await proc.signal(signals.SIGKILL)
        except Exception as exc:  # it ended or detached meanwhile; a re-attach kills it then
            log.info(
                "process %s of %s not killed at its deadline: %s",
                running.pid,
                running.computer_id,
                exc,
            )

    async def sync(self, org: Org, computer_id: str) -> None:
        """Learn what the computer's guest keeps: adopt the processes this server does not know,
        mark the detached ones that exited there, end the ones it no longer has. Detached ones
        stay detached (their output held in the guest) until `attach`. A no-op while every
        process is attached."""
        procs = self._by_computer.get(computer_id, {})
        if computer_id in self._synced and all(r.proc is not None for r in procs.values()):
            return
        async with self._locks.setdefault(computer_id, asyncio.Lock()):
            async with self._plane.kept(org, computer_id) as kept:
                infos = await kept.list() if kept.supported else []
            self._synced.add(computer_id)
            held = {info.pid for info in infos}
            for running in self.of(computer_id):
                if running.proc is None and running.pid not in held:
                    self._remove(running)
                    await running.end(end_event(-1, None, "the process is gone from the sandbox"))
            for info in infos:
                procs = self._by_computer.setdefault(computer_id, {})
                if info.pid not in procs and len(procs) < MAX_PER_COMPUTER:
                    procs[info.pid] = _adopted(computer_id, org, info)
                if info.pid in procs and procs[info.pid].proc is None:
                    procs[info.pid].finished = not info.running

    async def attach(self, running: Running) -> None:
        """Re-attach a detached process (its held output and, if it exited, its end follow)."""
        async with self._locks.setdefault(running.computer_id, asyncio.Lock()):
            await self._attach(running)

    async def _attach(self, running: Running) -> None:
        if running.proc is not None or running.ended is not None:
            return
        ready: asyncio.Future[Running] = asyncio.get_running_loop().create_future()

        @contextlib.asynccontextmanager
        async def attached() -> AsyncIterator[ExecProcess | PtySession]:
            async with self._plane.kept(running.org, running.computer_id) as kept:
                found = await kept.attach(running.pid, running.delivered)
                await running.said_lost(found.lost)
                yield found.proc

        self._spawn(self._serve(attached(), ready, lambda proc: running))
        running.finished = False
        try:
            await ready
        except ControlError as exc:
            log.info("process %s of %s not re-attached: %s", running.pid, running.computer_id, exc)
            if exc.code == "no_such_process":
                self._remove(running)
                await running.end(end_event(-1, None, "the process is gone from the sandbox"))

    def held(self, computer_id: str) -> None:
        """The computer is pausing: its processes' deadlines stop counting, as the guest's clock
        stops (envd's deadlines count on it)."""
        for running in self.of(computer_id):
            if running.deadline is not None:
                running.deadline.hold()

    def released(self, computer_id: str) -> None:
        """The computer runs again (resumed, woken, or its pause failed): the deadlines count on
        from now."""
        for running in self.of(computer_id):
            if running.deadline is not None:
                running.deadline.release()

    def stopped(self, computer_id: str) -> None:
        """`gone`, from a synchronous caller (the event tap)."""
        if self.of(computer_id) or computer_id in self._synced:
            self._spawn(self.gone(computer_id))

    def resync(self, computer_id: str) -> None:
        """After a resume: re-attach, in the background, the processes streams still watch."""
        watched = [r for r in self.of(computer_id) if r.proc is None and r.watchers]
        if watched:
            self._spawn(self._reattach(watched[0].org, computer_id))

    async def _reattach(self, org: Org, computer_id: str) -> None:
        try:
            await self.sync(org, computer_id)
            for running in self.of(computer_id):
                if running.proc is None and running.watchers:
                    await self.attach(running)
        except (ControlError, ConnectError) as exc:
            log.info("processes of %s not re-attached after its resume: %s", computer_id, exc)

    async def gone(self, computer_id: str) -> None:
        """The computer stopped or was deleted: its detached processes ended with it."""
        self._synced.discard(computer_id)
        self._locks.pop(computer_id, None)
        for running in self.of(computer_id):
            if running.proc is None:
                self._remove(running)
                await running.end(end_event(-1, None, "the sandbox stopped or its agent went away"))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

"""Kept processes: started by a host connection, not ended when it ends.

A ``KeptProcess`` owns its process, its pipes (or terminal) and an ``OutputLog`` its output
goes to, whether or not a stream is attached to it; the agent reaps it and keeps its exit
status until the host forgets it. The ``Keeper`` holds at most ``MAX_KEPT`` of them: past that a
new one pushes out the oldest that has exited and has no stream attached, and with none such it
is refused (``too_many_kept``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from . import fdio
from . import protocol as p
from .errors import AgentRequestError
from .output_log import LIMIT, OutputLog
from .process import (
    DRAIN_IDLE,
    Ended,
    Started,
    exit_watch,
    kill_group,
    start_exec,
    start_pty,
)

log = logging.getLogger("sanbox.agent")

MAX_KEPT = 256
MAX_TAG = 256  # characters of a tag; a listing shows at most as many of a command
_tasks: set[asyncio.Task[None]] = set()


class Attachment(Protocol):
    """The stream reading a kept process's output (guest/kept.py)."""

    def abort(self) -> None: ...


def _exit_status(ended: Ended) -> dict[str, Any]:
    code = ended.code
    sig = -code if code < 0 else None
    status = {"exit_code": 128 + sig if sig is not None else code, "signal": sig}
    core = {"core_dumped": True} if ended.core_dumped else {}  # (said only when so)
    return {**status, "timed_out": False, **core}


class KeptProcess:
    def __init__(self, started: Started, kind: str, cmd: str, tag: str | None, limit: int) -> None:
        self.proc = started.proc
        self.pid = started.proc.pid
        self.kind = kind
        self.cmd = cmd
        self.tag = tag
        self.log = OutputLog(limit)
        self.exit: dict[str, Any] | None = None
        self.attachment: Attachment | None = None
        self.changed = asyncio.Event()  # output came or the process ended: wakes the reader
        self.space = asyncio.Event()  # the reader took output or left: wakes the pipes
        self._started = started
        self._stdin: int | None = started.stdin
        self._reading_since: dict[int, float | None] = {}
        task = asyncio.get_running_loop().create_task(self._run())
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)

    @property
    def terminal(self) -> int | None:
        """The terminal's controlling side, for a pty process still running."""
        return self._started.stdin if self.kind == "pty" and self.exit is None else None

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pid": self.pid, "kind": self.kind, "cmd": self.cmd}
        out.update(running=self.exit is None, attached=self.attachment is not None)
        if self.tag is not None:
            out["tag"] = self.tag
        if self.exit is not None:
            out.update(exit_code=self.exit["exit_code"], signal=self.exit["signal"])
        return out

    def signal(self, sig: int) -> None:
        if self.exit is None:
            kill_group(self.pid, sig)

    async def write_stdin(self, data: bytes) -> None:
        if self._stdin is None:
            return
        with contextlib.suppress(OSError):  # it closed its input: what it won't read is dropped
            await fdio.write_all(self._stdin, data)

    def close_stdin(self) -> None:
        """EOF on stdin (for a pipe; a terminal stays open: EOF there is the user's ^D)."""
        if self.kind == "exec" and self._stdin is not None:
            fdio.close(self._stdin)
            self._started.fds.remove(self._stdin)
            self._stdin = None

    async def _pump(self, fd: int, channel: int) -> None:
        loop = asyncio.get_running_loop()
        while True:
            room = self.log.room()
            if room <= 0:
                self.space.clear()
                await self.space.wait()
                continue
            self._reading_since[channel] = loop.time()
            try:
                data = await fdio.read(fd, min(p.CHUNK, room))
            finally:
                self._reading_since[channel] = None
            if not data:
                return
            self.log.add(channel, data)
            self.changed.set()

    async def _run(self) -> None:
        pumps: dict[asyncio.Future[None], int] = {
            asyncio.ensure_future(self._pump(fd, ch)): ch for fd, ch in self._started.outputs
        }
        try:
            ended = await exit_watch(self.proc)
            await self._drain(pumps)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for fd in self._started.fds:
                fdio.close(fd)
            self._started.fds.clear()
            self._stdin = None
        self.exit = _exit_status(ended)
        self.changed.set()
        log.info("kept process %d exited: %s", self.pid, self.exit)

    async def _drain(self, pumps: dict[asyncio.Future[None], int]) -> None:
        """After the exit: read until EOF, or until the pipes the process's own background
        children hold open stay silent for DRAIN_IDLE (as an exec stream does)."""
        loop = asyncio.get_running_loop()
        while pending := [task for task in pumps if not task.done()]:
            await asyncio.wait(pending, timeout=DRAIN_IDLE / 4)
            now = loop.time()
            since = [self._reading_since.get(pumps[task]) for task in pending if not task.done()]
            if since and all(s is not None and now - s > DRAIN_IDLE for s in since):
                return


class Keeper:
    def __init__(self, limit: int = MAX_KEPT, log_limit: int = LIMIT) -> None:
        self.limit = limit
        self.log_limit = log_limit
        self._procs: dict[int, KeptProcess] = {}

    def spawn(self, kind: str, params: p.JsonDict) -> KeptProcess:
        if params.get("timeout") is not None:
            raise AgentRequestError("bad_request", "a kept process takes no timeout")
        tag = params.get("tag")
        if tag is not None and (not isinstance(tag, str) or len(tag) > MAX_TAG):
            raise AgentRequestError("bad_request", f"tag is a string of at most {MAX_TAG}")
        self._make_room()
        started = start_pty(params) if kind == "pty" else start_exec(params)
        argv = started.proc.args
        cmd = " ".join(argv) if isinstance(argv, list) else str(argv)
        kept = KeptProcess(started, kind, cmd[:MAX_TAG], tag, self.log_limit)
        self._procs[kept.pid] = kept
        return kept

    def _make_room(self) -> None:
        if len(self._procs) < self.limit:
            return
        for pid, kept in self._procs.items():
            if kept.exit is not None and kept.attachment is None:
                log.info("forgetting kept process %d (exited, never read) to keep another", pid)
                del self._procs[pid]
                return
        raise AgentRequestError(
            "too_many_kept",
            f"this computer already keeps {self.limit} processes running: end one first",
        )

    def get(self, pid: object) -> KeptProcess:
        kept = self._procs.get(pid) if isinstance(pid, int) else None
        if kept is None:
            raise AgentRequestError("no_such_process", f"no kept process {pid!r}")
        return kept

    def forget(self, pid: object) -> bool:
        """Drop an exited process's record (its status was read); False if it still runs."""
        kept = self.get(pid)
        if kept.exit is None:
            return False
        del self._procs[kept.pid]
        return True

    def listing(self) -> list[dict[str, Any]]:
        return [kept.info() for kept in self._procs.values()]

    def detach_all(self) -> None:
        """The host's connection ended: every kept process holds its output from now on."""
        for kept in self._procs.values():
            if kept.attachment is not None:
                kept.attachment.abort()

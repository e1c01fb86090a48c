"""Kept processes in the guest (``sanbox.guest.kept``): started by this connection, not ended
when it ends; listed, re-attached (held output first, then live output and the exit status) and
forgotten by a later one. An agent before protocol 2 has none (``supported`` is False).

What the guest says about its processes is a guest's word: each entry is checked, and a listing
is at most ``MAX_LISTED`` of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .channel import Requests
from .errors import RemoteError
from .process import ExecProcess, PtySession, command_params

KEEP_PROTOCOL = 2
MAX_LISTED = 1024
TEXT = 256  # characters kept of a command or tag the guest reports


@dataclass(frozen=True)
class KeptInfo:
    pid: int
    kind: str  # "exec" or "pty"
    cmd: str
    tag: str | None
    running: bool
    attached: bool
    exit_code: int | None = None
    signal: int | None = None


@dataclass(frozen=True)
class Attached:
    """A kept process re-attached: its ``proc`` (output from what was ``delivered`` on), and the
    bytes of each channel (1 stdout or the terminal, 2 stderr) that were ``lost``: produced,
    never delivered, and no longer held by the guest."""

    proc: ExecProcess | PtySession
    lost: dict[int, int]


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _info(entry: object) -> KeptInfo | None:
    if not isinstance(entry, dict):
        return None
    pid, kind, cmd, tag = entry.get("pid"), entry.get("kind"), entry.get("cmd"), entry.get("tag")
    if _int(pid) is None or kind not in ("exec", "pty") or not isinstance(cmd, str):
        return None
    return KeptInfo(
        pid=int(pid),  # type: ignore[arg-type]
        kind=str(kind),
        cmd=cmd[:TEXT],
        tag=tag[:TEXT] if isinstance(tag, str) else None,
        running=entry.get("running") is True,
        attached=entry.get("attached") is True,
        exit_code=_int(entry.get("exit_code")),
        signal=_int(entry.get("signal")),
    )


class Kept:
    """``client.kept``; ``hello`` is the agent's HELLO_ACK (its protocol says what it offers)."""

    def __init__(self, client: Requests, hello: dict[str, Any]) -> None:
        self._client = client
        protocol = hello.get("protocol")
        self.supported = isinstance(protocol, int) and protocol >= KEEP_PROTOCOL

    def _check(self) -> None:
        if not self.supported:
            raise RemoteError("not_supported", "this guest's agent cannot keep processes")

    async def exec(
        self,
        cmd: list[str] | str,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | int | None = None,
        tag: str | None = None,
    ) -> ExecProcess:
        """Start a command that outlives this connection (no timeout: it runs until it ends)."""
        self._check()
        params = {**command_params(cmd, env=env, cwd=cwd, user=user), "keep": True}
        if tag is not None:
            params["tag"] = tag
        channel = await self._client.open("exec", params, exec_stream=True)
        proc = await ExecProcess.started(channel)
        proc.kept = True
        return proc

    async def pty(
        self,
        cmd: list[str] | str | None = None,
        *,
        rows: int = 24,
        cols: int = 80,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | int | None = None,
        term: str = "xterm-256color",
        tag: str | None = None,
    ) -> PtySession:
        self._check()
        params = command_params(cmd, env=env, cwd=cwd, user=user)
        params.update(rows=rows, cols=cols, term=term, keep=True)
        if tag is not None:
            params["tag"] = tag
        channel = await self._client.open("pty", params, exec_stream=True)
        session = await PtySession.started(channel)
        session.kept = True
        return session

    async def list(self) -> list[KeptInfo]:
        self._check()
        found = (await self._client.call("kept", {"op": "list"})).get("processes")
        entries = found[:MAX_LISTED] if isinstance(found, list) else []
        return [info for entry in entries if (info := _info(entry)) is not None]

    async def forget(self, pid: int) -> bool:
        """Drop an exited process's record; False if it still runs."""
        self._check()
        return bool(
            (await self._client.call("kept", {"op": "forget", "pid": pid})).get("forgotten")
        )

    async def attach(self, pid: int, delivered: dict[int, int] | None = None) -> Attached:
        """Attach to a kept process; ``delivered`` is how many bytes of each channel the caller
        already has (the guest sends what follows)."""
        self._check()
        given = {str(channel): count for channel, count in (delivered or {}).items()}
        params: dict[str, Any] = {"op": "attach", "pid": pid, "delivered": given}
        channel = await self._client.open("kept", params, exec_stream=True)
        try:
            body = await channel.next_msg(30.0)
            if body is None or body.get("type") != "attached" or body.get("pid") != pid:
                raise RemoteError("bad_reply", f"agent did not attach process {pid}: {body!r}")
        except BaseException:
            await channel.close()
            raise
        lost_in = body.get("lost")
        lost: dict[int, int] = {}
        if isinstance(lost_in, dict):
            for key, count in lost_in.items():
                if key in ("1", "2") and (n := _int(count)) is not None and n > 0:
                    lost[int(key)] = n
        kind = PtySession if body.get("kind") == "pty" else ExecProcess
        proc = kind(channel, pid)
        proc.kept = True
        return Attached(proc, lost)

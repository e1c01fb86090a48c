"""envd's `process.Process` service over the guest agent: Start and Connect stream a process's
events; List, SendInput, CloseStdin, SendSignal and Update act on one by pid (or tag), and so
does StreamInput, a client stream of input (`{"start": selector}`, then `{"data": {"input"}}`
and `{"keepalive"}` messages).

Messages are proto3 JSON (`spec/process/process.proto` of e2b-dev/infra): `ProcessConfig` is
`{cmd, args, envs, cwd}`, events are `{"event": {"start"|"data"|"end"|"keepalive": …}}`, bytes
are base64, `Signal` is an enum name."""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import signal as signals
from collections.abc import AsyncIterator
from typing import Any

from ..control.guest import CommandNotFoundError, ExecProcess, PtySession
from .budgets import Event, EventQueue
from .connect import ConnectError
from .envd import Envd, Sandbox
from .running import Running, end_event

KEEPALIVE = 30.0  # seconds without an event before a keepalive (the SDK asks for 50 or less)
MAX_ARGS = 4096
MAX_GUEST_TAG = 256  # the guest keeps a tag this long with a kept process (a longer one: here)
_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")  # Go's strconv.Atoi, within an int64
SIGNALS = {"SIGNAL_SIGKILL": signals.SIGKILL, "SIGNAL_SIGTERM": signals.SIGTERM, 9: 9, 15: 15}
_INT32 = 1 << 31


def _config(msg: dict[str, Any]) -> dict[str, Any]:
    config = msg.get("process")
    if not isinstance(config, dict) or not isinstance(config.get("cmd"), str):
        raise ConnectError("invalid_argument", "process.cmd is required")
    args = config.get("args") or []
    envs = config.get("envs") or {}
    ok_args = isinstance(args, list) and all(isinstance(a, str) for a in args)
    ok_envs = isinstance(envs, dict) and all(isinstance(v, str) for v in envs.values())
    if not ok_args or not ok_envs or len(args) > MAX_ARGS or len(envs) > MAX_ARGS:
        raise ConnectError("invalid_argument", "process.args are strings, process.envs too")
    out: dict[str, Any] = {"cmd": config["cmd"], "args": args, "envs": envs}
    if isinstance(config.get("cwd"), str) and config["cwd"]:
        out["cwd"] = config["cwd"]
    return out


def _pty_size(msg: dict[str, Any]) -> tuple[int, int] | None:
    pty = msg.get("pty")
    if not isinstance(pty, dict):
        return None
    size = pty.get("size") or {}
    if not isinstance(size, dict):
        raise ConnectError("invalid_argument", "pty.size is {rows, cols}")
    try:
        rows, cols = int(size.get("rows") or 24), int(size.get("cols") or 80)
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity, which JSON reads
        raise ConnectError("invalid_argument", "pty.size is rows and cols") from None
    if not (1 <= rows <= 1000 and 1 <= cols <= 1000):
        raise ConnectError("invalid_argument", "pty.size is 1 to 1000 rows and cols")
    return rows, cols


def _selector(msg: dict[str, Any]) -> dict[str, Any]:
    selector = msg.get("process")
    if not isinstance(selector, dict) or not ({"pid", "tag"} & selector.keys()):
        raise ConnectError("invalid_argument", "process is a selector: {pid} or {tag}")
    return selector


def _bytes(value: object) -> bytes:
    try:
        return base64.b64decode(str(value or ""), validate=True)
    except (binascii.Error, ValueError):
        raise ConnectError("invalid_argument", "input is base64") from None


async def _events(running: Running, queue: EventQueue) -> AsyncIterator[Event]:
    yield {"event": {"start": {"pid": running.pid}}}
    while True:
        try:
            event = await asyncio.wait_for(queue.get(), KEEPALIVE)
        except TimeoutError:
            yield {"event": {"keepalive": {}}}
            continue
        if event is None:
            return
        yield {"event": event}


def deadline(header: str | None) -> float | None:
    """envd's `determineTimeoutFromHeader`: `Connect-Timeout-Ms` in seconds, None for none
    (absent, 0 or negative); a header that is not an integer is refused."""
    if not header:
        return None
    if not _INTEGER.fullmatch(header):
        raise ConnectError("invalid_argument", "Connect-Timeout-Ms is a number of milliseconds")
    ms = int(header)
    return ms / 1000 if ms > 0 else None


async def start(
    envd: Envd, sb: Sandbox, msg: dict[str, Any], timeout_ms: str | None = None
) -> AsyncIterator[Event]:
    """With `timeout_ms` (the request's `Connect-Timeout-Ms`) the process is killed at that
    deadline, as envd's Start does; the stream then ends with its end event."""
    timeout = deadline(timeout_ms)
    config = _config(msg)
    cmd = [config["cmd"], *config["args"]]
    cwd = sb.path(config.get("cwd", ""))
    size = _pty_size(msg)
    tag = msg.get("tag") if isinstance(msg.get("tag"), str) else None
    env = {"HOME": sb.home, "USER": sb.user, **sb.env, **config["envs"]}
    guest_tag = tag if tag is not None and len(tag) <= MAX_GUEST_TAG else None  # for adoption
    if size is not None:
        env.setdefault("TERM", "xterm-256color")
        session: Any = sb.plane.pty(
            sb.org,
            sb.computer_id,
            cmd,
            rows=size[0],
            cols=size[1],
            env=env,
            cwd=cwd,
            user=sb.user,
            keep=True,
            tag=guest_tag,
        )
    else:
        session = sb.plane.exec_stream(
            sb.org,
            sb.computer_id,
            cmd,
            env=env,
            cwd=cwd,
            user=sb.user,
            timeout=None,
            keep=True,
            tag=guest_tag,
        )
    try:
        running, queue = await envd.processes.start(
            sb.computer_id,
            sb.org,
            session,
            config,
            tag,
            stdin=bool(msg.get("stdin", True)),
            pty=size is not None,
            timeout=timeout,
        )
    except CommandNotFoundError as exc:
        yield {"event": {"start": {"pid": 0}}}
        yield {"event": {"data": {"stderr": base64.b64encode(exc.message.encode()).decode()}}}
        yield {"event": end_event(127)}
        return
    try:
        async for event in _events(running, queue):
            yield event
    finally:
        running.watchers.discard(queue)


async def _found(envd: Envd, sb: Sandbox, msg: dict[str, Any]) -> Running:
    """The process the selector names, re-attached first if a pause or a reconnect detached it
    (what it printed meanwhile goes to the streams watching it, if any)."""
    await envd.processes.sync(sb.org, sb.computer_id)
    running = envd.processes.find(sb.computer_id, _selector(msg))
    await envd.processes.attach(running)
    return running


def _attached(running: Running) -> ExecProcess | PtySession:
    if running.proc is None:
        raise ConnectError("unavailable", f"process {running.pid} cannot be reached right now")
    return running.proc


async def connect(envd: Envd, sb: Sandbox, msg: dict[str, Any]) -> AsyncIterator[Event]:
    """Watch first, then re-attach: the output a detached process's guest held comes here."""
    await envd.processes.sync(sb.org, sb.computer_id)
    running = envd.processes.find(sb.computer_id, _selector(msg), ended=True)
    async with running.watch() as queue:
        await envd.processes.attach(running)
        async for event in _events(running, queue):
            yield event
    envd.processes.discard(running)


async def list_processes(envd: Envd, sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    await envd.processes.sync(sb.org, sb.computer_id)
    return {"processes": [r.info() for r in envd.processes.of(sb.computer_id) if r.listed]}


async def _write(running: Running, given: object) -> None:
    """A `ProcessInput` (`{stdin}` or `{pty}`, base64) to the process."""
    if not isinstance(given, dict):
        raise ConnectError("invalid_argument", "input is {stdin} or {pty}")
    data = _bytes(given.get("pty") if "pty" in given else given.get("stdin"))
    proc = _attached(running)
    if isinstance(proc, ExecProcess):
        await proc.write_stdin(data)
    else:
        await proc.write(data)


async def send_input(envd: Envd, sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    await _write(await _found(envd, sb, msg), msg.get("input") or {})
    return {}


async def stream_input(
    envd: Envd, sb: Sandbox, messages: AsyncIterator[dict[str, Any]]
) -> dict[str, Any]:
    """Each piece of input written before the next message is read: in order, and the request
    held back by the guest's flow control rather than buffered here."""
    running: Running | None = None
    async for msg in messages:
        if isinstance(msg.get("start"), dict):
            running = await _found(envd, sb, msg["start"])
        elif isinstance(msg.get("data"), dict):
            if running is None:
                raise ConnectError("failed_precondition", "the input stream's first is start")
            await _write(running, msg["data"].get("input") or {})
        elif "keepalive" not in msg:
            raise ConnectError("unimplemented", "an input stream's events: start, data, keepalive")
    return {}


async def close_stdin(envd: Envd, sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    proc = _attached(await _found(envd, sb, msg))
    if isinstance(proc, ExecProcess):
        await proc.close_stdin()
    return {}


def _signal(given: object) -> int | str:
    """The `Signal` a SendSignal names, read as envd reads it (proto3 JSON through connect-go's
    codec, which drops an enum name it does not know): SIGKILL or SIGTERM, or else the name
    envd's answer gives what it read (`SIGNAL_UNSPECIFIED` for none, null or an unknown name;
    the number for a number the enum lacks). A value that is no enum (a list, a fraction, past
    32 bits) is `invalid_argument`, as envd refuses a message it cannot read."""
    if given is None or isinstance(given, str):
        return SIGNALS.get(given or "", "SIGNAL_UNSPECIFIED")
    if isinstance(given, float) and given.is_integer():
        given = int(given)  # 9.0 is 9 to protojson
    if isinstance(given, int) and not isinstance(given, bool) and -_INT32 <= given < _INT32:
        return SIGNALS.get(given, str(given) if given else "SIGNAL_UNSPECIFIED")
    raise ConnectError("invalid_argument", "signal is SIGNAL_SIGKILL or SIGNAL_SIGTERM")


async def send_signal(envd: Envd, sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    """As envd's `SendSignal`: a message it cannot read is refused first, then a process not
    found, then a signal other than SIGKILL and SIGTERM (`unimplemented`, envd's code for it)."""
    sig = _signal(msg.get("signal"))
    running = await _found(envd, sb, msg)
    if isinstance(sig, str):
        raise ConnectError(
            "unimplemented", f"invalid signal: {sig}: send SIGNAL_SIGKILL or SIGNAL_SIGTERM"
        )
    await _attached(running).signal(sig)
    return {}


async def update(envd: Envd, sb: Sandbox, msg: dict[str, Any]) -> dict[str, Any]:
    size = _pty_size(msg)  # checked before the process is looked for
    proc = _attached(await _found(envd, sb, msg))
    if size is not None and isinstance(proc, PtySession):
        await proc.resize(*size)
    return {}


UNARY = {
    "List": list_processes,
    "SendInput": send_input,
    "CloseStdin": close_stdin,
    "SendSignal": send_signal,
    "Update": update,
}
STREAMS = {"Start": start, "Connect": connect}

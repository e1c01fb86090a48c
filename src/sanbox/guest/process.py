"""``exec`` and ``pty`` streams: run a process as some user, relay its I/O and exit status."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import struct
import subprocess
import termios
from dataclasses import dataclass
from typing import Any, NamedTuple

from . import fdio
from . import protocol as p
from .accounts import build_env, resolve_user
from .errors import AgentRequestError
from .relay import OutputRelay, StdinRelay
from .stream import Send, Stream, param_int, param_str

DRAIN_IDLE = 0.2  # after exit, stop reading pipes that stay silent this long
_reapers: set[asyncio.Task[None]] = set()


def command_argv(params: p.JsonDict, default: list[str] | None = None) -> list[str]:
    argv = params.get("argv")
    cmd = params.get("cmd")
    if argv is None and cmd is None and default is not None:
        return default
    if isinstance(cmd, str):
        return ["/bin/sh", "-c", cmd]
    if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        return argv
    raise AgentRequestError("bad_request", "give 'argv' (non-empty list) or 'cmd' (string)")


def spawn(argv: list[str], params: p.JsonDict, term: str, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session as the requested user; map failures to error codes."""
    ident = resolve_user(params.get("user"))
    env = build_env(ident, params.get("env"), term)
    cwd = params.get("cwd")
    if cwd is None:
        cwd = ident.home if os.path.isdir(ident.home) else "/"
    if not isinstance(cwd, str) or not os.path.isdir(cwd):
        raise AgentRequestError("invalid_cwd", f"not a directory: {cwd}")
    if ident.uid != os.getuid():
        if os.getuid() != 0:
            raise AgentRequestError("permission_denied", f"agent cannot run as {ident.name}")
        popen.update(user=ident.uid, group=ident.gid, extra_groups=ident.groups)
    try:
        return subprocess.Popen(
            argv, env=env, cwd=cwd, start_new_session=True, close_fds=True, **popen
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        if exc.filename == cwd:
            raise AgentRequestError("invalid_cwd", f"{cwd}: {exc.strerror}") from None
        raise AgentRequestError("command_not_found", f"{argv[0]}: {exc.strerror}") from None
    except OSError as exc:
        raise AgentRequestError("spawn_failed", f"{argv[0]}: {exc}") from None


class Ended(NamedTuple):
    """How a process ended: Popen's `returncode` (its exit status, or minus the signal that
    killed it) and whether that signal dumped core (WCOREDUMP)."""

    code: int
    core_dumped: bool = False


def dumped_core(pid: int) -> bool:
    """Whether the child `pid`, ended and not yet reaped, dumped core (waitid's `CLD_DUMPED`),
    looked at without reaping it; False if it has not ended or was reaped already."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return info is not None and info.si_code == os.CLD_DUMPED


def _reaped(proc: subprocess.Popen[bytes]) -> Ended | None:
    """The process's end if it has ended (reaped now), its core dump looked at first."""
    core = proc.returncode is None and dumped_core(proc.pid)
    code = proc.poll()
    return None if code is None else Ended(code, core)


def _waited(proc: subprocess.Popen[bytes]) -> Ended:
    """The process's end, waited for in a thread (a kernel without pidfd)."""
    with contextlib.suppress(ChildProcessError):  # until it ends, not reaping it
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    return _reaped(proc) or Ended(proc.wait())


def exit_watch(proc: subprocess.Popen[bytes]) -> asyncio.Future[Ended]:
    """A future of how the process ended, set by the loop when its pidfd turns readable (a
    thread waits where the kernel has no pidfd). Cancelling it stops the watch."""
    loop = asyncio.get_running_loop()
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return asyncio.ensure_future(loop.run_in_executor(None, _waited, proc))
    done: asyncio.Future[Ended] = loop.create_future()

    def check() -> None:
        if not done.done() and (ended := _reaped(proc)) is not None:
            done.set_result(ended)

    def stop(_: asyncio.Future[Ended]) -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)

    loop.add_reader(pidfd, check)
    done.add_done_callback(stop)
    check()  # it may have ended already
    return done


def kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _hangup(proc: subprocess.Popen[bytes]) -> None:
    kill_group(proc.pid, signal.SIGHUP)
    try:
        async with asyncio.timeout(DRAIN_IDLE):
            await exit_watch(proc)
    except TimeoutError:
        kill_group(proc.pid, signal.SIGKILL)
        await exit_watch(proc)


def parse_signal(value: object) -> int:
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            return int(signal.Signals(value))
        if isinstance(value, str):
            name = value.upper()
            return int(signal.Signals[name if name.startswith("SIG") else "SIG" + name])
    except (KeyError, ValueError):
        pass
    raise AgentRequestError("bad_request", f"unknown signal {value!r}")


class ProcessStream(Stream):
    """Shared by exec, pty and ssh: stdin relay, output relay, signals, exit report (the relays
    are the loop's callbacks, relay.py: a command's end is reported in one pass of the loop)."""

    term = "dumb"
    eof_held = False  # True: outputs' ends go with the exit, not at once (ExecStream)

    def __init__(self, stream_id: int, params: p.JsonDict, send: Send) -> None:
        super().__init__(stream_id, params, send)
        self.proc: subprocess.Popen[bytes] | None = None
        self._owned_fds: list[int] = []
        self._stdin: StdinRelay | None = None
        self._outputs: OutputRelay | None = None

    def start_process(self) -> tuple[int, list[tuple[int, int]]]:
        """Spawn; return (stdin fd, [(output fd, channel)])."""
        raise NotImplementedError

    async def run(self) -> None:
        timeout = self.params.get("timeout")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise AgentRequestError("bad_request", "timeout must be a positive number")
        stdin_fd, outputs = self.start_process()
        assert self.proc is not None
        self.send_msg("started", pid=self.proc.pid)
        self._outputs = OutputRelay(self.id, self.send_window, self._send_output)
        for fd, channel in outputs:
            self._outputs.add(fd, channel)
        self._stdin = StdinRelay(stdin_fd, self.consumed, self.stdin_eof)
        while not self.inbox.empty():  # what the host sent before the process started
            if (data := self.inbox.get_nowait()) is not None:
                self._stdin.push(data)
            else:
                self._stdin.eof()
        timed_out = False
        try:
            async with asyncio.timeout(timeout):
                ended = await exit_watch(self.proc)
        except TimeoutError:
            timed_out = True
            kill_group(self.proc.pid, signal.SIGKILL)
            ended = await exit_watch(self.proc)
        await self._outputs.ended(DRAIN_IDLE)
        self._outputs.stop()
        code = ended.code
        sig = -code if code < 0 else None
        exit_code = 124 if timed_out else (128 + sig if sig is not None else code)
        core = {"core_dumped": True} if ended.core_dumped else {}  # (said only when so)
        self.send_last("exit", exit_code=exit_code, signal=sig, timed_out=timed_out, **core)

    def _send_output(self, frame: p.Frame) -> None:
        """Output goes at once; an output's end too, unless the stream holds it (`eof_held`)."""
        if self.eof_held and isinstance(frame, p.Eof):
            self.hold(frame)
        else:
            self.send(frame)

    def on_data(self, channel: int, data: bytes) -> None:
        if channel == p.STDIN and self._stdin is not None:
            self._stdin.push(data)
        else:
            super().on_data(channel, data)

    def on_eof(self, channel: int) -> None:
        if channel == p.STDIN and self._stdin is not None:
            self._stdin.eof()
        else:
            super().on_eof(channel)

    def on_window(self, credit: int) -> None:
        super().on_window(credit)
        if self._outputs is not None:
            self._outputs.credit()

    def stdin_eof(self, fd: int) -> None:
        fdio.close(fd)
        with contextlib.suppress(ValueError):
            self._owned_fds.remove(fd)

    def on_msg(self, body: p.JsonDict) -> None:
        if body.get("type") == "signal" and self.proc is not None:
            try:
                sig = parse_signal(body.get("signal"))
            except AgentRequestError as exc:
                self.send_error(exc.code, exc.message)
                return
            if self.proc.returncode is None:
                kill_group(self.proc.pid, sig)
        else:
            super().on_msg(body)

    def cleanup(self) -> None:
        if self._outputs is not None:
            self._outputs.stop()  # before the descriptors close
        if self._stdin is not None:
            self._stdin.close()
        for fd in self._owned_fds:
            fdio.close(fd)
        self._owned_fds.clear()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            reaper = asyncio.get_running_loop().create_task(_hangup(proc))
            _reapers.add(reaper)
            reaper.add_done_callback(_reapers.discard)


def set_winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _take_terminal() -> None:  # runs in the child, after setsid
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@dataclass
class Started:
    """A spawned process and the descriptors the caller now owns."""

    proc: subprocess.Popen[bytes]
    stdin: int
    outputs: list[tuple[int, int]]  # (fd, channel)
    fds: list[int]  # every descriptor to close at the end


def start_exec(params: p.JsonDict) -> Started:
    """``argv``/``cmd`` with stdin, stdout and stderr on non-blocking pipes."""
    return spawn_piped(command_argv(params), params, "dumb", channels=(p.STDOUT, p.STDERR))


def spawn_piped(
    argv: list[str], params: p.JsonDict, term: str, *, channels: tuple[int, ...]
) -> Started:
    """Spawn with a pipe for stdin and one for each output channel (stdout, then stderr; an
    output not asked for is the agent's own). This side's ends are non-blocking."""
    child: list[int] = []
    ours: list[int] = []
    try:
        for index in range(1 + len(channels)):
            read, write = os.pipe()  # not inherited: the child gets them as 0, 1 and 2 only
            child.append(write if index else read)
            ours.append(read if index else write)
        streams = dict(zip(("stdin", "stdout", "stderr"), child, strict=False))
        proc = spawn(argv, params, term, **streams)
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        for fd in child:
            os.close(fd)
    for fd in ours:
        os.set_blocking(fd, False)
    return Started(proc, ours[0], list(zip(ours[1:], channels, strict=True)), ours)


def start_pty(params: p.JsonDict) -> Started:
    """``argv``/``cmd`` (a login shell if neither) on a new terminal of ``rows`` x ``cols``."""
    shell = ["/bin/bash", "-l"] if os.path.exists("/bin/bash") else ["/bin/sh", "-l"]
    argv = command_argv(params, default=shell)
    rows = param_int(params, "rows", 24)
    cols = param_int(params, "cols", 80)
    term = param_str(params, "term", "xterm-256color")
    master, slave = os.openpty()
    try:
        set_winsize(slave, rows, cols)
        ident = resolve_user(params.get("user"))
        if ident.uid != os.getuid():
            os.fchown(slave, ident.uid, -1)
        proc = spawn(
            argv, params, term, stdin=slave, stdout=slave, stderr=slave, preexec_fn=_take_terminal
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    os.set_blocking(master, False)
    return Started(proc, master, [(master, p.STDOUT)], [master])


class ExecStream(ProcessStream):
    """A command's output ends are sent with its exit, in one write, not one write each (~0.1 ms
    each under TCG, measured; the host reads an exec's end from its exit)."""

    kind = "exec"
    eof_held = True

    def start_process(self) -> tuple[int, list[tuple[int, int]]]:
        started = start_exec(self.params)
        self.proc = started.proc
        self._owned_fds.extend(started.fds)
        return started.stdin, started.outputs


class PtyStream(ProcessStream):
    kind = "pty"

    def start_process(self) -> tuple[int, list[tuple[int, int]]]:
        started = start_pty(self.params)
        self.proc = started.proc
        self._owned_fds.extend(started.fds)
        return started.stdin, started.outputs

    def stdin_eof(self, fd: int) -> None:
        pass  # the terminal stays open for output; EOF on a pty is the user's ^D

    def on_msg(self, body: p.JsonDict) -> None:
        if body.get("type") != "resize":
            super().on_msg(body)
            return
        rows, cols = body.get("rows"), body.get("cols")
        if not (isinstance(rows, int) and isinstance(cols, int) and rows > 0 and cols > 0):
            self.send_error("bad_request", "resize needs positive integer rows and cols")
            return
        if self._owned_fds and self.proc is not None:
            set_winsize(self._owned_fds[0], rows, cols)
            if self.proc.returncode is None:
                kill_group(self.proc.pid, signal.SIGWINCH)

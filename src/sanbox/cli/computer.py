"""The computer commands: create, ls, get, exec, shell, cp, stop, start, restart, rm, logs."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from rich.table import Table

from ..sdk import AsyncExecStream, Computer, ComputerNotFoundError, Exit, Stderr, Stdout
from . import config
from ._output import console, err_console, fail

POLL_INTERVAL = 0.5
"""Seconds between polls while `sanbox create` waits; tests set 0."""
BIG_FILE = 1 << 20
"""`sanbox cp` shows a progress bar from this size on."""
SETTLED = {"running", "stopped", "error", "deleted"}
EnvOption = Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable.")]
LabelOption = Annotated[
    list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE, repeatable.")
]


def _pairs(values: list[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values or []:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            fail("invalid_argument", f"{what} must be KEY=VALUE, got {value!r}")
        out[key] = rest
    return out


def create(
    template: str = typer.Option("base", "--template", "-t", help="Template to boot."),
    name: str | None = typer.Option(None, "--name", "-n", help="Name (default: generated)."),
    cpus: int = typer.Option(1, "--cpus", help="vCPUs."),
    idle_timeout: int | None = typer.Option(
        None,
        "--idle-timeout",
        min=0,
        help="Seconds without activity before it is suspended (0 = never; default: template's).",
    ),  # fmt: skip
    memory: int = typer.Option(512, "--memory", help="Memory in MiB."),
    disk: int | None = typer.Option(None, "--disk", help="Disk in GiB (default: template's)."),
    env: EnvOption = None,
    label: LabelOption = None,
    as_json: bool = typer.Option(False, "--json", help="Print the computer as JSON."),
) -> None:
    """Create a computer and wait until it runs."""
    envs, labels = _pairs(env, "--env"), _pairs(label, "--label")
    creating = err_console.status(f"creating from {template}…")
    with config.reported(), config.client() as client, creating as status:
        computer = client.computers.create(
            template=template, name=name, vcpus=cpus, memory_mib=memory, disk_gib=disk,
            env=envs, labels=labels, wait=False, idle_timeout=idle_timeout,
        )  # fmt: skip
        while computer.state not in SETTLED:
            status.update(f"{computer.name}: {computer.state}…")
            time.sleep(POLL_INTERVAL)
            computer.refresh()
    if as_json:
        console.print_json(json.dumps(computer.record.to_json()))
    if computer.state != "running":
        fail("create_failed", f"{computer.name} is {computer.state}: {computer.last_error or '?'}")
    if not as_json:
        console.print(f"[green]running[/] {computer.name} [dim]{computer.id}[/]", highlight=False)


def ls(
    state: str | None = typer.Option(None, "--state", help="Only computers in this state."),
    label: LabelOption = None,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List computers."""
    labels = _pairs(label, "--label")
    with config.reported(), config.client() as client:
        computers = client.computers.list(state=state, labels=labels)
    if as_json:
        console.print_json(json.dumps([c.record.to_json() for c in computers]))
        return
    table = Table("NAME", "ID", "STATE", "TEMPLATE", "CPUS", "MEMORY", "DISK", "CREATED", box=None)
    for c in computers:
        colour = {"running": "green", "error": "red"}.get(c.state, "yellow")
        disk = f"{c.disk_gib} GiB" if c.disk_gib is not None else "-"
        table.add_row(
            c.name, c.id, f"[{colour}]{c.state}[/]", c.template, str(c.vcpus),
            f"{c.memory_mib} MiB", disk, c.created_at or "",
        )  # fmt: skip
    console.print(table)


def get(
    name: str = typer.Argument(..., help="Computer name or id."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show one computer."""
    with config.reported(), config.client() as client:
        record = client.computers.get(name).record.to_json()
    if as_json:
        console.print_json(json.dumps(record))
        return
    table = Table(show_header=False, box=None)
    for key, value in record.items():
        shown = json.dumps(value) if isinstance(value, dict) else str(value)
        table.add_row(f"[bold]{key}[/]", shown)
    console.print(table)


def outcome(verb: str, computer: Computer) -> str:
    """What a lifecycle command did with memory, said plainly."""
    if verb in ("stop", "pause") or computer.state != "running" or not computer.memory:
        return {
            "stop": "; memory dropped on purpose, disk kept",
            "pause": "; memory and processes saved, no process runs",
        }.get(verb, "")
    if computer.memory == "restored":
        return "; memory: restored"
    return f"; memory: lost ({computer.memory_reason}), booted fresh on its disk"


def _lifecycle(verb: str, done: str) -> Callable[[str], None]:
    def command(name: str = typer.Argument(..., help="Computer name or id.")) -> None:
        with config.reported(), config.client() as client:
            computer = client.computers.get(name)
            with err_console.status(f"{verb} {computer.name}…"):
                getattr(computer, verb)()
        console.print(f"{done} {computer.name} [dim]({computer.state})[/]{outcome(verb, computer)}",
                      highlight=False)  # fmt: skip

    command.__doc__ = f"{verb.capitalize()} a computer."
    return command


def update(
    name: str = typer.Argument(..., help="Computer name or id."),
    idle_timeout: int = typer.Option(
        ..., "--idle-timeout", min=0, help="Seconds without activity before suspending; 0 = never."
    ),
) -> None:
    """Change a computer's settings (its idle timeout)."""
    with config.reported(), config.client() as client:
        computer = client.computers.get(name).update(idle_timeout=idle_timeout)
    console.print(f"{computer.name}: idle timeout {computer.idle_timeout}s", highlight=False)


def rm(
    names: Annotated[list[str], typer.Argument(help="Computer names or ids.")],
    force: bool = typer.Option(
        False, "--force", "-f", help="Ignore computers that do not exist (like rm -f)."
    ),
) -> None:
    """Delete computers, running or not (a running one is stopped first); asks nothing."""
    with config.reported(), config.client() as client:
        for name in names:
            try:
                computer = client.computers.get(name)
            except ComputerNotFoundError:
                if force:
                    continue
                raise
            with err_console.status(f"deleting {computer.name}…"):
                computer.delete()
            console.print(f"deleted {computer.name}", highlight=False)


def logs(
    name: str = typer.Argument(..., help="Computer name or id."),
    show_console: bool = typer.Option(False, "--console", help="Show the VM's console tail."),
    lines: int = typer.Option(100, "--lines", "-n", help="Console lines to show."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events."),
) -> None:
    """Show a computer's events (or, with --console, its console log tail)."""
    with config.reported(), config.client() as client:
        computer = client.computers.get(name)
        if show_console:
            for line in computer.console(lines=lines):
                console.print(line, markup=False, highlight=False)
            return
        for event in computer.events():
            _print_event(event.created_at, event.type, event.message)
        if follow:
            for event in client.events():
                if event.computer_id == computer.id:
                    _print_event(event.created_at, event.type, event.message)


def _print_event(at: str | None, kind: str, message: str) -> None:
    console.print(f"[dim]{at or ''}[/] [bold]{kind}[/] {message}", highlight=False)


def _remote(spec: str) -> tuple[str, str] | None:
    """`NAME:PATH` names a computer's file; anything with a `/` before the `:` is local."""
    head, sep, tail = spec.partition(":")
    if not sep or not head or "/" in head:
        return None
    return head, tail


def cp(
    src: str = typer.Argument(..., help="Source: LOCAL or NAME:PATH."),
    dst: str = typer.Argument(..., help="Destination: LOCAL or NAME:PATH."),
) -> None:
    """Copy a file between this machine and a computer (one side must be NAME:PATH)."""
    remote_src, remote_dst = _remote(src), _remote(dst)
    if (remote_src is None) == (remote_dst is None):
        fail("invalid_argument", "exactly one of SRC and DST must be NAME:PATH")
    with config.reported(), config.client() as client:
        if remote_dst is not None:
            local = Path(src)
            if not local.is_file():
                fail("invalid_argument", f"{src} is not a file")
            name, path = remote_dst
            if not path or path.endswith("/"):
                path = f"{path or '/root/'}{local.name}"
            files = client.computers.get(name).files
            with _progress(local.stat().st_size) as advance:
                size = files.upload(local, path, progress=advance)
        else:
            assert remote_src is not None
            name, path = remote_src
            target = Path(dst)
            if target.is_dir():
                target = target / Path(path).name
            files = client.computers.get(name).files
            total = files.stat(path).size
            with _progress(total) as advance:
                size = files.download(path, target, progress=advance)
    err_console.print(f"copied {size} bytes", highlight=False)


class _progress:
    """A transfer bar for big files, nothing for small ones; yields the SDK's callback."""

    def __init__(self, total: int | None) -> None:
        self._bar: Progress | None = None
        if total is not None and total >= BIG_FILE:
            columns = (BarColumn(), DownloadColumn(), TransferSpeedColumn())
            self._bar = Progress(*columns, console=err_console, transient=True)
            self._task = self._bar.add_task("copy", total=total)

    def __enter__(self) -> Callable[[int, int | None], None] | None:
        if self._bar is None:
            return None
        self._bar.start()
        bar, task = self._bar, self._task
        return lambda done, total: bar.update(task, completed=done, total=total)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def exec_(
    name: Annotated[str, typer.Argument(help="Computer name or id.")],
    cmd: Annotated[list[str], typer.Argument(help="The command and its arguments (after --).")],
    env: EnvOption = None,
    cwd: str | None = typer.Option(None, "--cwd", help="Working directory."),
    user: str | None = typer.Option(None, "--user", "-u", help="Run as this user."),
) -> None:
    """Run a command, streaming its output; exits with its exit code.

    Put the command after `--` when it has options of its own: `sanbox exec box -- ls -l`.
    """
    envs = _pairs(env, "--env")
    with config.reported():
        code = asyncio.run(_stream(name, cmd, envs, cwd, user, pty=False))
    raise typer.Exit(code)


def shell(name: str = typer.Argument(..., help="Computer name or id.")) -> None:
    """Open an interactive shell (a PTY), like ssh."""
    with config.reported():
        code = asyncio.run(_stream(name, None, {}, None, None, pty=True))
    raise typer.Exit(code)


async def _stream(
    name: str, cmd: list[str] | None, env: dict[str, str], cwd: str | None, user: str | None,
    pty: bool,
) -> int:  # fmt: skip
    size = shutil.get_terminal_size()
    async with config.async_client() as client:
        computer = await client.computers.get(name)
        request = computer.exec_stream(cmd, env, cwd, user, pty, size.lines, size.columns)
        async with request as stream, _Terminal(stream, raw=pty and sys.stdin.isatty()):
            out, err = sys.stdout.buffer, sys.stderr.buffer
            async for event in stream:
                if isinstance(event, Stdout):
                    out.write(event.data)
                    out.flush()
                elif isinstance(event, Stderr):
                    err.write(event.data)
                    err.flush()
                elif isinstance(event, Exit):
                    return _exit_status(event)
    return 1


def _exit_status(event: Exit) -> int:
    if event.timed_out:
        return 124
    if event.signal and event.exit_code < 0:
        number = getattr(signal, event.signal, None)
        return 128 + int(number) if number is not None else 1
    return event.exit_code


class _Terminal:
    """Forward local stdin (raw when a TTY) and window resizes to the stream; restore after."""

    def __init__(self, stream: AsyncExecStream, raw: bool) -> None:
        self._stream, self._raw = stream, raw
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._saved: Any = None

    async def __aenter__(self) -> _Terminal:
        loop = asyncio.get_running_loop()
        if self._raw:
            import termios
            import tty

            fd = sys.stdin.fileno()
            self._saved = termios.tcgetattr(fd)
            tty.setraw(fd)
            loop.add_reader(fd, lambda: self._queue.put_nowait(os.read(fd, 65536)))
            loop.add_signal_handler(signal.SIGWINCH, self._resized)
            self._tasks.append(asyncio.create_task(self._pump()))
        elif not sys.stdin.isatty():
            threading.Thread(target=self._read_blocking, args=(loop,), daemon=True).start()
            self._tasks.append(asyncio.create_task(self._pump()))
        return self

    def _read_blocking(self, loop: asyncio.AbstractEventLoop) -> None:
        source = sys.stdin.buffer
        while True:
            try:
                chunk = source.read1(65536) if hasattr(source, "read1") else source.read(65536)
            except (OSError, ValueError):
                chunk = b""
            loop.call_soon_threadsafe(self._queue.put_nowait, chunk)
            if not chunk:
                return

    async def _pump(self) -> None:
        while chunk := await self._queue.get():
            await self._stream.send_stdin(chunk)
        await self._stream.send_eof()

    def _resized(self) -> None:
        size = shutil.get_terminal_size()
        self._tasks.append(asyncio.create_task(self._stream.resize(size.lines, size.columns)))

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._raw:
            import termios

            loop = asyncio.get_running_loop()
            loop.remove_reader(sys.stdin.fileno())
            loop.remove_signal_handler(signal.SIGWINCH)
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._saved)


def register(app: typer.Typer) -> None:
    """Add the computer commands to the top level of `app`."""
    app.command("create")(create)
    app.command("ls")(ls)
    app.command("get")(get)
    app.command("exec")(exec_)
    app.command("shell")(shell)
    app.command("cp")(cp)
    app.command("stop")(_lifecycle("stop", "stopped"))
    app.command("start")(_lifecycle("start", "started"))
    app.command("restart")(_lifecycle("restart", "restarted"))
    app.command("pause")(_lifecycle("pause", "paused"))
    app.command("resume")(_lifecycle("resume", "resumed"))
    app.command("update")(update)
    app.command("rm")(rm)
    app.command("logs")(logs)


__all__ = ["register"]

"""Work inside a computer's guest: commands, shells, files, TCP to a guest port, SSH.

Each verb finds the computer's running machine (waking a suspended one first, re-attaching after
a server restart), marks the computer busy for the idle watcher while it works, and turns the
agent's errors into control errors with stable codes; a dead channel on a dead VM records the
computer as stopped. Streaming verbs are async context managers: the computer stays busy, and
errors are translated, until the caller leaves the block."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from ..host.door import (
    AgentError,
    AgentRouteError,
    AgentTimeoutError,
    AgentUnavailableError,
    CommandNotFoundError,
    ConnectionRefusedInGuestError,
    DirWatch,
    ExecProcess,
    ExecResult,
    Exit,
    FileInfo,
    FileNotFoundInGuestError,
    FsEvent,
    InvalidPathError,
    Kept,
    KeptInfo,
    Machine,
    PtySession,
    RemoteError,
    Source,
    Stderr,
    Stdout,
    TcpStream,
    VmNotRunningError,
)
from ..store.models import ComputerRow, Org
from .errors import (
    ConflictError,
    HostUnavailableError,
    InvalidRequestError,
    NotFoundError,
)
from .fleet import Fleet
from .host_errors import from_agent
from .pausing import wake
from .states import State, check_action

__all__ = [  # what the API's routes need of the guest's types, through the control plane
    "FsEvent",
    "ExecProcess",
    "ExecResult",
    "Exit",
    "FileInfo",
    "Kept",
    "KeptInfo",
    "PtySession",
    "Stderr",
    "Stdout",
    "TcpStream",
    "CommandNotFoundError",
]


async def running(fleet: Fleet, org: Org, ref: str) -> Machine:
    """The running machine of a computer (a suspended one is woken first, one being suspended
    or woken once that ends), re-attached if needed; a typed error if it is not running."""
    return (await _running(fleet, org, ref))[1]


async def _running(fleet: Fleet, org: Org, ref: str) -> tuple[ComputerRow, Machine]:
    row = fleet.get(org, ref)
    if row.state in (State.SUSPENDED, State.PAUSING, State.RESUMING):
        # suspended, being suspended or being woken: the call waits for that to end, and wakes
        # it (a user's pause ends `paused`, which the call is refused below)
        await wake(fleet, row)
        row = fleet.get(org, ref)
    check_action("use", State(row.state), row.name)
    fleet.host_of(row)  # a fleet host that does not answer: `host_unreachable` now, no hang
    fleet.touch(row.id)
    machine = fleet.machines.get(row.id)
    if machine is not None and machine.vm.alive():
        return row, machine
    async with fleet.lock(row.id):
        row = fleet.get(org, row.id)
        return row, await fleet.machine_locked(row)


@contextlib.asynccontextmanager
async def guest_call(fleet: Fleet, org: Org, ref: str) -> AsyncIterator[Machine]:
    """The running machine for `ref`, with agent errors translated on the way out."""
    async with _call(fleet, org, ref) as (_, machine):
        yield machine


@contextlib.asynccontextmanager
async def _call(fleet: Fleet, org: Org, ref: str) -> AsyncIterator[tuple[ComputerRow, Machine]]:
    """`guest_call`, with the computer's record as read for the call (its environment)."""
    row, machine = await _running(fleet, org, ref)
    async with fleet.activity(machine.computer_id), translated(fleet, machine):
        yield row, machine


@contextlib.asynccontextmanager
async def translated(fleet: Fleet, machine: Machine) -> AsyncIterator[None]:
    """The guest agent's errors as control errors with stable codes."""
    try:
        yield
    except InvalidPathError as exc:
        raise InvalidRequestError(exc.message, "invalid_path") from exc
    except FileNotFoundInGuestError as exc:
        raise NotFoundError(exc.message, "not_found") from exc
    except ConnectionRefusedInGuestError as exc:
        raise ConflictError(exc.message, "connection_refused") from exc
    except CommandNotFoundError:
        raise  # the exec verbs answer it in their own shape (exit 127)
    except RemoteError as exc:
        raise InvalidRequestError(exc.message, exc.code) from exc
    except AgentTimeoutError as exc:
        raise from_agent(exc, machine.computer_id) from exc
    except AgentRouteError as exc:  # its fleet host does not answer: nothing known of it
        raise HostUnavailableError(f"computer {machine.computer_id}'s {exc}") from exc
    except (AgentUnavailableError, VmNotRunningError, AgentError) as exc:
        row = fleet.by_id(machine.computer_id)
        if row is not None and row.host_id is not None:
            fleet.host_of(row)  # its fleet host went silent: host_unreachable, not stopped
        if not machine.vm.alive():
            await fleet.vm_exited(machine.computer_id, "its VM process exited")
            raise ConflictError(
                f"computer {machine.computer_id} stopped while in use: start it again",
                "computer_not_running",
            ) from exc
        raise from_agent(exc, machine.computer_id) from exc


# commands -----------------------------------------------------------------------------------


def _env(fleet: Fleet, row: ComputerRow, env: dict[str, str] | None) -> dict[str, str] | None:
    """The computer's environment (its template's and its create's, then its secrets'
    placeholders and trust variables), under the call's own."""
    bound = fleet.book.env(row.id) if fleet.book is not None else {}
    merged = {**row.env, **bound, **(env or {})}
    return merged or None


async def exec_command(
    fleet: Fleet,
    org: Org,
    ref: str,
    cmd: list[str] | str,
    *,
    env: dict[str, str] | None,
    cwd: str | None,
    user: str | int | None,
    stdin: bytes | None,
    timeout: float | None,
    max_output: int,
) -> ExecResult:
    """Run to completion; a command that is not there exits 127 with the shell's words."""
    async with _call(fleet, org, ref) as (row, machine):
        client = await machine.client()
        try:
            return await client.exec(
                cmd,
                env=_env(fleet, row, env),
                cwd=cwd,
                user=user,
                stdin=stdin,
                timeout=timeout,
                max_output=max_output,
            )
        except CommandNotFoundError as exc:
            return ExecResult(127, b"", (exc.message + "\n").encode(), signal=None, timed_out=False)


@contextlib.asynccontextmanager
async def exec_stream(
    fleet: Fleet,
    org: Org,
    ref: str,
    cmd: list[str] | str,
    *,
    env: dict[str, str] | None,
    cwd: str | None,
    user: str | int | None,
    timeout: float | None,
    keep: bool = False,
    tag: str | None = None,
) -> AsyncIterator[ExecProcess]:
    """A started command whose streams the caller drives (CommandNotFoundError if it is not
    there: the caller says so in its own protocol). With `keep` (and no timeout) it is a kept
    process, which outlives this block and the agent connection, where the guest's agent can
    keep processes (`proc.kept` says whether it did)."""
    async with _call(fleet, org, ref) as (row, machine):
        client = await machine.client()
        env = _env(fleet, row, env)
        if keep and timeout is None and client.kept.supported:
            yield await client.kept.exec(cmd, env=env, cwd=cwd, user=user, tag=tag)
        else:
            yield await client.exec_stream(cmd, env=env, cwd=cwd, user=user, timeout=timeout)


@contextlib.asynccontextmanager
async def pty(
    fleet: Fleet,
    org: Org,
    ref: str,
    cmd: list[str] | str | None,
    *,
    rows: int,
    cols: int,
    env: dict[str, str] | None,
    cwd: str | None,
    user: str | int | None,
    keep: bool = False,
    tag: str | None = None,
) -> AsyncIterator[PtySession]:
    async with _call(fleet, org, ref) as (row, machine):
        client = await machine.client()
        env = _env(fleet, row, env)
        if keep and client.kept.supported:
            session = await client.kept.pty(
                cmd, rows=rows, cols=cols, env=env, cwd=cwd, user=user, tag=tag
            )
        else:
            session = await client.pty(cmd, rows=rows, cols=cols, env=env, cwd=cwd, user=user)
        try:
            yield session
        finally:  # however the caller ended (its key lapsed: cancelled), the stream ends
            await session.close()


@contextlib.asynccontextmanager
async def kept(fleet: Fleet, org: Org, ref: str) -> AsyncIterator[Kept]:
    """The guest's kept processes (list, attach, forget), the computer busy and errors
    translated until the block ends (hold it while an attached process is read)."""
    async with guest_call(fleet, org, ref) as machine:
        yield (await machine.client()).kept


# files --------------------------------------------------------------------------------------


async def put_file(
    fleet: Fleet, org: Org, ref: str, path: str, source: Source, mode: int | None
) -> int:
    """Write a file; `mode` None: one that is there keeps its mode and owner."""
    async with guest_call(fleet, org, ref) as machine:
        client = await machine.client()
        return await client.files.put(path, source, mode=mode)


async def stat_file(fleet: Fleet, org: Org, ref: str, path: str, follow: bool = True) -> FileInfo:
    async with guest_call(fleet, org, ref) as machine:
        return await (await machine.client()).files.stat(path, follow)


UNSIZED_MOST = 64 * 2**20  # bytes of a file whose stat says 0 (/proc's) sent, at most


async def read_file(
    fleet: Fleet,
    org: Org,
    ref: str,
    path: str,
    size: int | None = None,
    most: int | None = None,
) -> AsyncIterator[bytes]:
    """The file's bytes as they come (a stat first tells its size and that it is a file); with
    `size` (what that stat said, sent as the answer's length), at most that many: a file that
    grew since is sent as it was (a log being written), where more bytes than the length said
    would break the answer. One that shrank ends short, and its answer is cut. With `size` 0 (a
    /proc file, which holds more than its stat says), to its end, but no more than
    UNSIZED_MOST: past it the answer is cut (/proc/kcore would never end). With `most`, its
    first `most` bytes at most (`head -c`), whatever the file is by the time it is read: a
    caller that holds the answer in memory (the MCP server's in-process client) asks for no
    more than it can hold."""
    left, sent = size or None, 0
    if most is not None:
        left = most if left is None else min(left, most)
    async with guest_call(fleet, org, ref) as machine:
        client = await machine.client()
        async with contextlib.aclosing(client.files.get(path)) as chunks:
            async for chunk in chunks:
                if left is not None:
                    chunk, left = chunk[:left], left - min(left, len(chunk))
                sent += len(chunk)
                if size == 0 and sent > UNSIZED_MOST:
                    raise InvalidRequestError(
                        f"{path} holds more than its stat says and more than "
                        f"{UNSIZED_MOST >> 20} MiB: read it with a command (head, dd)",
                        "file_too_large",
                    )
                if chunk:
                    yield chunk
                if left == 0:
                    return


async def list_files(fleet: Fleet, org: Org, ref: str, path: str) -> list[FileInfo]:
    async with guest_call(fleet, org, ref) as machine:
        return await (await machine.client()).files.list(path)


async def remove_file(fleet: Fleet, org: Org, ref: str, path: str, recursive: bool) -> None:
    async with guest_call(fleet, org, ref) as machine:
        await (await machine.client()).files.remove(path, recursive=recursive)


class GuestWatch:
    """A folder watched in the guest (`DirWatch`), its errors translated as every verb's are."""

    def __init__(self, fleet: Fleet, machine: Machine, watch: DirWatch) -> None:
        self._fleet, self._machine, self._watch = fleet, machine, watch

    async def next(self) -> list[FsEvent] | None:
        """The next events, None once the folder is gone (removed or moved)."""
        async with translated(self._fleet, self._machine):
            return await self._watch.next()


@contextlib.asynccontextmanager
async def watch_dir(
    fleet: Fleet, org: Org, ref: str, path: str, recursive: bool
) -> AsyncIterator[GuestWatch | None]:
    """A folder watched in the guest with inotify until the block ends (the computer busy, as
    while any streaming verb); None from an agent that cannot (before protocol 3): the caller
    compares listings instead."""
    async with guest_call(fleet, org, ref) as machine:
        client = await machine.client()
        if not client.watches.supported:
            yield None
            return
        watch = await client.watches.open(path, recursive)
        try:
            yield GuestWatch(fleet, machine, watch)
        finally:
            await watch.close()


async def make_dir(fleet: Fleet, org: Org, ref: str, path: str) -> None:
    async with guest_call(fleet, org, ref) as machine:
        await (await machine.client()).files.mkdir(path, parents=True)


# connections --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def tcp(fleet: Fleet, org: Org, ref: str, port: int) -> AsyncIterator[TcpStream]:
    """A byte stream to `port` on the guest's loopback, closed when the block ends."""
    async with guest_call(fleet, org, ref) as machine:
        stream = await (await machine.client()).tcp(port)
        try:
            yield stream
        finally:
            await stream.close()


@contextlib.asynccontextmanager
async def ssh(fleet: Fleet, org: Org, ref: str) -> AsyncIterator[TcpStream]:
    """One SSH connection's bytes to a fresh `sshd -i` in the guest, whose sessions get the
    computer's environment as its commands do."""
    async with _call(fleet, org, ref) as (row, machine):
        client = await machine.client()
        try:
            stream = await client.ssh.connect(_env(fleet, row, None))
        except RemoteError as exc:
            if exc.code == "ssh_unavailable":  # an image without sshd
                raise ConflictError(exc.message, "ssh_unavailable") from exc
            raise
        try:
            yield stream
        finally:
            await stream.close()


async def authorize_ssh_key(fleet: Fleet, org: Org, ref: str, public_key: str) -> tuple[bool, str]:
    """Let `public_key` log in as root; (whether it was added now, the computer's host key)."""
    async with guest_call(fleet, org, ref) as machine:
        client = await machine.client()
        added = await client.ssh.authorize(public_key)
        return added, await client.ssh.host_key()

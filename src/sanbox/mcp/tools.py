"""Sanbox's MCP tools, written once against the async SDK (`AsyncSanbox`).

Each door (stdio: `stdio.py`; HTTP on the server: `http.py`) says where a tool call's client
comes from (`Clients`); the tools do the rest through the SDK, so a tool means exactly what the
API means, with the API's checks, audit and errors. A `SanboxError` becomes the tool's error
result (`is_error`, with the API's code and message).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from .. import __version__
from ..sdk import AsyncSanbox, InvalidRequestError, SanboxError
from . import results
from .results import FILE_CAP, OUTPUT_CAP
from .secret_tools import add_secret_tools

Clients = Callable[[Context[Any, Any]], AbstractAsyncContextManager[AsyncSanbox]]
"""The client a tool call acts through (the caller's key), for the time of the call."""
Tool = Callable[..., Awaitable[CallToolResult]]

EXEC_TIMEOUT = 60.0
"""Seconds an `exec` may run unless the call says otherwise (at most `EXEC_MAX_TIMEOUT`)."""
EXEC_MAX_TIMEOUT = 3600.0

INSTRUCTIONS = """\
Sanbox runs agent computers: persistent, isolated Linux microVMs. Create one (create_computer),
run commands in it (exec), read and write its files, publish a port as a URL, and stop, pause,
resume or delete it. Keep its state as a snapshot (snapshot_computer; with memory, its processes
too) to make new computers from later (create_computer from_snapshot), or fork it into several
running copies to try things in parallel (fork_computer). A computer is named by its id (cmp_...)
or its name. Outbound network access is denied unless its allow list names the hosts.
Secrets (API keys) are set by a person, never through these tools: bind one to a computer
(bind_secret) and its requests to the secret's hosts carry the key, while the computer only
sees a placeholder."""

Ref = Annotated[str, Field(description="the computer's id (cmp_...) or name")]
GuestPath = Annotated[str, Field(description="absolute path inside the computer")]


def hints(
    *,
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
    open_world: bool = False,
) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=open_world,
    )


READ = hints(read_only=True, idempotent=True)


def too_big(path: str, size: int | None = None) -> InvalidRequestError:
    """`path` is over `FILE_CAP` (`size` bytes, or None: more than the cap, size unknown)."""
    told = f"more than {FILE_CAP} bytes" if size is None else f"{size} bytes"
    return InvalidRequestError(
        f"{path} is {told}, over read_file's {FILE_CAP}: read part of it with exec "
        "(head -c, tail -c, sed -n) or copy it with `sanbox cp`",
        code="file_too_large",
    )


def build_server(clients: Clients) -> MCPServer[Any]:
    """An MCP server with every Sanbox tool, each call acting through `clients(ctx)`."""
    server: MCPServer[Any] = MCPServer(
        "sanbox", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    def tool(name: str, annotations: ToolAnnotations) -> Callable[[Tool], Tool]:
        def register(fn: Tool) -> Tool:
            @functools.wraps(fn)
            async def answered(*args: Any, **kwargs: Any) -> CallToolResult:
                try:
                    return await fn(*args, **kwargs)
                except SanboxError as exc:
                    return results.error_result(exc)

            doc = inspect.cleandoc(fn.__doc__ or "")
            server.add_tool(answered, name=name, description=doc, annotations=annotations)
            return fn

        return register

    @tool("list_computers", READ)
    async def list_computers(
        ctx: Context[Any, Any],
        state: Annotated[str | None, Field(description="only computers in this state")] = None,
        labels: Annotated[
            dict[str, str] | None, Field(description="only computers with all these labels")
        ] = None,
    ) -> CallToolResult:
        """List the computers of your org, one line each."""
        async with clients(ctx) as sanbox:
            found = await sanbox.computers.list(state=state, labels=labels)
        return results.computers_result([c.record for c in found])

    @tool("get_computer", READ)
    async def get_computer(computer: Ref, ctx: Context[Any, Any]) -> CallToolResult:
        """One computer: state, template, resources, last error."""
        async with clients(ctx) as sanbox:
            c = await sanbox.computers.get(computer)
        return results.computer_result(c.record)

    @tool("create_computer", hints())
    async def create_computer(
        ctx: Context[Any, Any],
        template: Annotated[
            str | None, Field(description="template to boot; default: base")
        ] = None,
        name: Annotated[str | None, Field(description="DNS label; default: generated")] = None,
        from_snapshot: Annotated[
            str | None,
            Field(
                description="start from this snapshot (id or name): its disk, and its "
                "memory and processes if it kept them"
            ),
        ] = None,
        vcpus: Annotated[int | None, Field(ge=1, description="virtual CPUs; default 1")] = None,
        memory_mib: Annotated[
            int | None, Field(ge=128, description="memory in MiB; default 512")
        ] = None,
        disk_gib: Annotated[
            int | None, Field(ge=1, description="disk; default: template's")
        ] = None,
        allow: Annotated[
            list[str] | None,
            Field(
                description="hosts (api.github.com), wildcards (*.pypi.org) and cidr:port "
                "rules it may reach; empty: nothing goes out; default: the template's"
            ),
        ] = None,
        idle_timeout: Annotated[
            int | None,
            Field(
                ge=0,
                description="seconds without activity before it is suspended "
                "(0: never; default: the template's); the next command wakes it",
            ),
        ] = None,
        env: Annotated[dict[str, str] | None, Field(description="environment variables")] = None,
        labels: Annotated[dict[str, str] | None, Field(description="labels")] = None,
    ) -> CallToolResult:
        """Create a computer (from a template, or from a snapshot) and wait until it runs."""
        async with clients(ctx) as sanbox:
            c = await sanbox.computers.create(
                template=template,
                name=name,
                vcpus=vcpus,
                memory_mib=memory_mib,
                disk_gib=disk_gib,
                allow=allow,
                idle_timeout=idle_timeout,
                env=env,
                labels=labels,
                from_snapshot=from_snapshot,
            )
        return results.computer_result(c.record)

    @tool("snapshot_computer", hints())
    async def snapshot_computer(
        computer: Ref,
        ctx: Context[Any, Any],
        memory: Annotated[
            bool,
            Field(
                description="keep its memory and running processes too (running or "
                "paused computers); default: the disk only"
            ),
        ] = False,
        name: Annotated[str | None, Field(description="a name for the snapshot")] = None,
    ) -> CallToolResult:
        """Keep a computer's state as a snapshot of your org: it outlives the computer, and
        create_computer(from_snapshot=...) makes new computers from it."""
        async with clients(ctx) as sanbox:
            c = await sanbox.computers.get(computer)
            snap = await c.snapshot(memory=memory, name=name)
        return results.snapshot_result(snap)

    @tool("list_snapshots", READ)
    async def list_snapshots(ctx: Context[Any, Any]) -> CallToolResult:
        """List your org's snapshots, one line each."""
        async with clients(ctx) as sanbox:
            return results.snapshots_result(await sanbox.snapshots.list())

    @tool("delete_snapshot", hints(destructive=True, idempotent=True))
    async def delete_snapshot(
        snapshot: Annotated[str, Field(description="the snapshot's id (snp_...) or name")],
        ctx: Context[Any, Any],
    ) -> CallToolResult:
        """Delete a snapshot. Computers made from it keep working. This cannot be undone."""
        async with clients(ctx) as sanbox:
            return results.snapshot_result(await sanbox.snapshots.delete(snapshot))

    @tool("fork_computer", hints())
    async def fork_computer(
        computer: Ref,
        ctx: Context[Any, Any],
        count: Annotated[int, Field(ge=1, le=16, description="how many copies")] = 1,
        name: Annotated[
            str | None,
            Field(description="the fork's name, or the prefix of several (NAME-1 ...)"),
        ] = None,
    ) -> CallToolResult:
        """Fork a computer into running copies that start where it is now (its files, and its
        processes if it runs or is paused), each with its own hostname and identity."""
        async with clients(ctx) as sanbox:
            c = await sanbox.computers.get(computer)
            forks = await c.fork(count=count, name=name)
        return results.computers_result([f.record for f in forks])

    def lifecycle(verb: str, annotations: ToolAnnotations, doc: str) -> None:
        async def act(computer: Ref, ctx: Context[Any, Any]) -> CallToolResult:
            async with clients(ctx) as sanbox:
                c = await sanbox.computers.get(computer)
                await getattr(c, verb)()
            return results.computer_result(c.record)

        act.__doc__ = doc
        tool(f"{verb}_computer", annotations)(act)

    lifecycle("start", hints(idempotent=True), "Boot a stopped computer again on its disk.")
    lifecycle(
        "stop",
        hints(destructive=True, idempotent=True),
        "Stop a computer: its processes and memory end, its disk is kept.",
    )
    lifecycle(
        "pause",
        hints(idempotent=True),
        "Pause a computer: memory and processes are saved and its VM ends; resume brings it back.",
    )
    lifecycle(
        "resume",
        hints(idempotent=True),
        "Resume a paused or suspended computer; says whether its memory was restored.",
    )
    lifecycle(
        "delete",
        hints(destructive=True, idempotent=True),
        "Delete a computer with its disk. This cannot be undone.",
    )

    @tool("exec", hints(destructive=True, open_world=True))
    async def exec_(
        computer: Ref,
        cmd: Annotated[
            str | list[str],
            Field(description="a shell command line (runs in sh -c) or an argv list"),
        ],
        ctx: Context[Any, Any],
        cwd: Annotated[str | None, Field(description="working directory")] = None,
        env: Annotated[dict[str, str] | None, Field(description="environment variables")] = None,
        stdin: Annotated[str | None, Field(description="fed to its standard input")] = None,
        stdin_encoding: Annotated[
            Literal["utf-8", "base64"],
            Field(description="how `stdin` is written: text, or base64 for bytes (a gzip, a tar)"),
        ] = "utf-8",
        timeout: Annotated[
            float, Field(gt=0, le=EXEC_MAX_TIMEOUT, description="seconds before it is killed")
        ] = EXEC_TIMEOUT,
    ) -> CallToolResult:
        """Run a command in a computer to completion: exit code, stdout and stderr (each cut to
        its first 64 KiB; the result says when)."""
        given = stdin if stdin is None else _bytes_of(stdin, stdin_encoding, "stdin")
        async with clients(ctx) as sanbox:
            c = await sanbox.computers.get(computer)
            r = await c.exec(
                cmd, env=env, cwd=cwd, stdin=given, timeout=timeout, max_output_bytes=OUTPUT_CAP
            )
        return results.exec_result(c.name, r)

    @tool("read_file", READ)
    async def read_file(computer: Ref, path: GuestPath, ctx: Context[Any, Any]) -> CallToolResult:
        """Read a file (up to 1 MiB): its text, or base64 when it is not UTF-8."""
        async with clients(ctx) as sanbox:
            c = await sanbox.computers.get(computer)
            info = await c.files.stat(path)  # a big file is refused with its size, unread
            if info.type == "file" and info.size > FILE_CAP:
                raise too_big(path, info.size)
            # The in-process client holds the whole answer in memory (ASGITransport does not
            # stream), and the file may have become anything since its stat (a guest can swap
            # in a 1 TB sparse file): the server reads one byte past the cap, no more.
            data = await c.files.read(path, max_bytes=FILE_CAP + 1)
        if len(data) > FILE_CAP:  # it grew in the meantime
            raise too_big(path)
        return results.file_result(path, data)

    @tool("write_file", hints(destructive=True, idempotent=True))
    async def write_file(
        computer: Ref,
        path: GuestPath,
        content: Annotated[str, Field(description="the file's content (up to 1 MiB)")],
        ctx: Context[Any, Any],
        encoding: Annotated[
            Literal["utf-8", "base64"], Field(description="how `content` is written")
        ] = "utf-8",
        mode: Annotated[str | None, Field(description="octal mode, like 0755")] = None,
    ) -> CallToolResult:
        """Write a file (created with its parent folders, or replaced)."""
        data = _bytes_of(content, encoding, "content")
        if len(data) > FILE_CAP:
            raise InvalidRequestError(
                f"{len(data)} bytes is over write_file's {FILE_CAP}: copy it with `sanbox cp`",
                code="file_too_large",
            )
        async with clients(ctx) as sanbox:
            c = await sanbox.computers.get(computer)
            size = await c.files.write(path, data, mode=mode)
        text = f"wrote {size} bytes to {path} on {c.name}"
        return results.result(text, {"computer": c.name, "path": path, "size": size})

    @tool("list_files", READ)
    async def list_files(computer: Ref, path: GuestPath, ctx: Context[Any, Any]) -> CallToolResult:
        """List a folder: type, size and name of each entry."""
        async with clients(ctx) as sanbox:
            c = await sanbox.computers.get(computer)
            entries = await c.files.list(path)
        return results.entries_result(path, entries)

    @tool("publish_port", hints(idempotent=True, open_world=True))
    async def publish_port(
        computer: Ref,
        port: Annotated[int, Field(ge=1, le=65535, description="TCP port inside the computer")],
        ctx: Context[Any, Any],
        public: Annotated[
            bool, Field(description="reachable without an API key (default: key needed)")
        ] = False,
    ) -> CallToolResult:
        """Publish a port of the computer as an HTTP URL (HTTP and WebSocket)."""
        async with clients(ctx) as sanbox:
            c = await sanbox.computers.get(computer)
            published = await c.publish(port, public=public)
        return results.port_result(c.name, published)

    add_secret_tools(tool, clients)  # list, bind, unbind: no tool ever takes a secret's value
    return server


def _bytes_of(text: str, encoding: str, what: str) -> bytes:
    """The bytes a tool was given as `what`: text as UTF-8, or base64 (`validation_error` if it
    is not)."""
    try:
        return results.decoded(text, encoding)
    except ValueError:
        raise InvalidRequestError(f"{what} is not valid base64", code="validation_error") from None

"""`sanbox exec NAME [--env K=V] [--cwd DIR] [--user U] [--] CMD...`, `sanbox shell NAME` (a
login shell in a PTY) and `sanbox ssh-proxy NAME` (OpenSSH's ProxyCommand: one a connection)
without the typer app.

`parse_exec` and `parse_proxy` read those plain forms the way click would (sanbox.cli.argv:
options may come before, between and after the positionals until `--`; the first `--` ends them)
and give up, returning None, on anything else: `--help`, `--env=A=1`, `-eA=1`, an unknown
option, a repeated `--cwd`, an option without its value or with one that starts with `-`, a bad
KEY=VALUE, too few arguments (or, for `shell` and `ssh-proxy`, more than the name). The typer
app then parses the same argv and behaves (or fails) exactly as it always did.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .argv import Grammar, is_pair, read

if TYPE_CHECKING:
    from ..sdk._websocket import WebSocketLike

EXEC = Grammar(
    arguments=("name", "cmd"),
    options={"--env": "env", "-e": "env", "--cwd": "cwd", "--user": "user", "-u": "user"},
    many=frozenset({"env"}),
    checks={"env": is_pair},
    rest=True,
)
NAME = Grammar(arguments=("name",))  # `shell NAME`, `ssh-proxy NAME`


@dataclass(frozen=True)
class ExecArgs:
    name: str
    cmd: list[str] | None  # None: a login shell (`pty`)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    user: str | None = None
    pty: bool = False


def parse_exec(argv: list[str]) -> ExecArgs | None:
    """`argv` (after `sanbox`) as a plain `exec` or `shell`, or None: let the typer app have
    it."""
    if argv and argv[0] == "shell":
        shell = read(argv[1:], NAME)
        return None if shell is None else ExecArgs(shell["name"], None, pty=True)
    if not argv or argv[0] != "exec":
        return None
    args = read(argv[1:], EXEC)
    if args is None:
        return None
    return ExecArgs(
        args["name"], args.rest, args.pairs("env"), args.value("cwd"), args.value("user")
    )


def run_exec(args: ExecArgs) -> int:
    """Run it as `sanbox exec` (or `shell`) does; its exit status. A `SanboxError` propagates
    (the caller reports it as the typer app's commands do); an interrupt and a closed stdout end
    it as typer ends a command: 130, and 1 without a traceback."""
    import asyncio

    try:
        code = asyncio.run(_direct(args))
        if code is None:  # no server reached: the usual way, whose error says so as always
            from ..sdk import AsyncSanbox
            from .streaming import stream

            client = AsyncSanbox()
            code = asyncio.run(
                stream(client, args.name, args.cmd, args.env, args.cwd, args.user, args.pty)
            )
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 1


async def _direct(args: ExecArgs) -> int | None:
    """The exec WebSocket opened by the computer's name, without the SDK's HTTP client (httpx:
    ~0.06 s to load), the `websockets` library for a `ws://` server (plainws.py), nor a GET of
    the computer first: the WebSocket says what that GET would
    (computer_not_found, unauthorized, ...) with the same code and message. None when the server
    could not be reached: nothing was sent."""
    import shutil

    from ..sdk.errors import ConnectionFailedError
    from ..sdk.exec_protocol import ExecStart
    from ..sdk.exec_stream import AsyncExecStream
    from .streaming import relay, with_terminal

    target = _Target(args.name, "exec/stream")
    size = shutil.get_terminal_size()
    cmd, pty = with_terminal(args.cmd, args.pty)
    start = ExecStart(
        cmd, args.env, args.cwd, args.user, pty=pty, rows=size.lines, cols=size.columns
    )
    try:
        session = AsyncExecStream(target.connect, target.url, target.headers, start)
        return await relay(session, pty=pty)
    except ConnectionFailedError:
        if target.reached:
            raise
        return None


def parse_proxy(argv: list[str]) -> str | None:
    """The computer of a plain `sanbox ssh-proxy NAME` (`argv` after `sanbox`), or None: let the
    typer app have it."""
    if not argv or argv[0] != "ssh-proxy":
        return None
    args = read(argv[1:], NAME)
    return None if args is None else args["name"]


def run_proxy(name: str) -> int:
    """Relay stdin and stdout to a fresh sshd in computer `name`, as `sanbox ssh-proxy` does
    (OpenSSH runs it for every connection); its exit status. A `SanboxError` propagates, as from
    `run_exec`."""
    import asyncio

    try:
        if not asyncio.run(_direct_proxy(name)):  # no server reached: the usual way says so
            from ..sdk import AsyncSanbox
            from .ssh_relay import proxy

            asyncio.run(proxy(AsyncSanbox(), name))
        return 0
    except KeyboardInterrupt:
        return 130


async def _direct_proxy(name: str) -> bool:
    """The SSH WebSocket opened by the computer's name, as `_direct` opens the exec one; False
    when the server could not be reached: nothing was sent."""
    from ..sdk.errors import ConnectionFailedError
    from ..sdk.ssh_stream import AsyncSshStream
    from .ssh_relay import pipe

    target = _Target(name, "ssh")
    try:
        async with AsyncSshStream(target.connect, target.url, target.headers) as stream:
            await pipe(stream)
        return True
    except ConnectionFailedError:
        if target.reached:
            raise
        return False


class _Target:
    """A computer's WebSocket at `/v1/computers/{name}/{what}`: its URL, the key's header, and a
    connector that notes whether the server was reached (`ws://` through plainws.py, `wss://`
    through the `websockets` library)."""

    def __init__(self, name: str, what: str) -> None:
        from ..sdk._websocket import websocket_url, websockets_connector
        from ..sdk.config import resolve_config
        from ..sdk.paths import segment
        from .plainws import plain_connector

        config = resolve_config()
        self.headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self.url = websocket_url(config.url, f"/v1/computers/{segment(name)}/{what}")
        self._opener = plain_connector if self.url.startswith("ws://") else websockets_connector
        self.reached = False

    @asynccontextmanager
    async def connect(self, url: str, headers: dict[str, str]) -> AsyncIterator[WebSocketLike]:
        async with self._opener(url, headers) as ws:
            self.reached = True
            yield ws

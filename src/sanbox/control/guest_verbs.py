"""The verbs inside a computer's guest (exec, PTY, files, TCP, SSH), as `Computers` offers them:
each goes to the computer's host through the `Fleet` (control/guest.py does the work)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from ..host.door import ExecProcess, ExecResult, FileInfo, PtySession, Source, TcpStream
from ..store.models import Org
from . import guest
from .fleet import Fleet


class GuestVerbs:
    """`Computers`' verbs inside the guest; they need only its `fleet`."""

    fleet: Fleet

    async def exec(
        self,
        org: Org,
        ref: str,
        cmd: list[str] | str,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | int | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        max_output: int,
    ) -> ExecResult:
        return await guest.exec_command(
            self.fleet,
            org,
            ref,
            cmd,
            env=env,
            cwd=cwd,
            user=user,
            stdin=stdin,
            timeout=timeout,
            max_output=max_output,
        )

    def exec_stream(
        self,
        org: Org,
        ref: str,
        cmd: list[str] | str,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | int | None = None,
        timeout: float | None = None,
        keep: bool = False,
        tag: str | None = None,
    ) -> contextlib.AbstractAsyncContextManager[ExecProcess]:
        return guest.exec_stream(
            self.fleet,
            org,
            ref,
            cmd,
            env=env,
            cwd=cwd,
            user=user,
            timeout=timeout,
            keep=keep,
            tag=tag,
        )

    def pty(
        self,
        org: Org,
        ref: str,
        cmd: list[str] | str | None = None,
        *,
        rows: int = 24,
        cols: int = 80,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | int | None = None,
        keep: bool = False,
        tag: str | None = None,
    ) -> contextlib.AbstractAsyncContextManager[PtySession]:
        return guest.pty(
            self.fleet,
            org,
            ref,
            cmd,
            rows=rows,
            cols=cols,
            env=env,
            cwd=cwd,
            user=user,
            keep=keep,
            tag=tag,
        )

    def kept(self, org: Org, ref: str) -> contextlib.AbstractAsyncContextManager[guest.Kept]:
        """The guest's kept processes (started with `keep`): list, attach, forget."""
        return guest.kept(self.fleet, org, ref)

    async def put_file(
        self, org: Org, ref: str, path: str, source: Source, mode: int | None
    ) -> int:
        return await guest.put_file(self.fleet, org, ref, path, source, mode)

    async def stat_file(self, org: Org, ref: str, path: str, follow: bool = True) -> FileInfo:
        """`follow=False`: a symbolic link itself (`Files.stat`)."""
        return await guest.stat_file(self.fleet, org, ref, path, follow)

    def read_file(
        self, org: Org, ref: str, path: str, size: int | None = None, most: int | None = None
    ) -> AsyncIterator[bytes]:
        return guest.read_file(self.fleet, org, ref, path, size, most)

    async def list_files(self, org: Org, ref: str, path: str) -> list[FileInfo]:
        return await guest.list_files(self.fleet, org, ref, path)

    def watch_dir(
        self, org: Org, ref: str, path: str, recursive: bool = False
    ) -> contextlib.AbstractAsyncContextManager[guest.GuestWatch | None]:
        """A folder watched in the guest (None: its agent cannot; list and compare instead)."""
        return guest.watch_dir(self.fleet, org, ref, path, recursive)

    async def remove_file(self, org: Org, ref: str, path: str, recursive: bool = False) -> None:
        await guest.remove_file(self.fleet, org, ref, path, recursive)

    async def make_dir(self, org: Org, ref: str, path: str) -> None:
        await guest.make_dir(self.fleet, org, ref, path)

    def tcp(
        self, org: Org, ref: str, port: int
    ) -> contextlib.AbstractAsyncContextManager[TcpStream]:
        return guest.tcp(self.fleet, org, ref, port)

    def ssh(self, org: Org, ref: str) -> contextlib.AbstractAsyncContextManager[TcpStream]:
        return guest.ssh(self.fleet, org, ref)

    async def authorize_ssh_key(self, org: Org, ref: str, public_key: str) -> tuple[bool, str]:
        return await guest.authorize_ssh_key(self.fleet, org, ref, public_key)

"""A small asyncio client for QEMU's monitor protocol (QMP) on a Unix socket. `pass_fd` hands
QEMU an open file over the socket (SCM_RIGHTS + `getfd`), for migrations that need no `exec:`
(QEMU's sandbox forbids spawning); `add_fd` puts one in an fd set, for commands that take a file
name (`/dev/fdset/ID`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Any, Protocol

from ..errors import MonitorError


class QmpError(MonitorError):
    """QEMU's monitor refused a command or did not answer."""

    code = "qmp_error"


class QmpNoAnswer(QmpError):
    """QEMU did not answer a command (in time, or its monitor went away): it may yet have done
    it, or be doing it."""


class QmpClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self.events: list[dict[str, Any]] = []

    @classmethod
    async def connect(cls, path: Path, timeout: float = 10.0) -> QmpClient:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(str(path))
                client = cls(reader, writer)
                await client._read()  # greeting
                await client.execute("qmp_capabilities")
                return client
        except (OSError, TimeoutError) as exc:
            raise QmpError(f"cannot reach the QEMU monitor at {path}: {exc}") from exc

    async def _read(self) -> dict[str, Any]:
        line = await self._reader.readline()
        if not line:
            raise QmpError("QEMU monitor closed the connection")
        msg: dict[str, Any] = json.loads(line)
        return msg

    async def execute(self, command: str, timeout: float = 30.0, **arguments: Any) -> Any:
        msg: dict[str, Any] = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        self._writer.write(json.dumps(msg).encode() + b"\n")
        return await self._reply(command, timeout)

    async def pass_fd(self, name: str, fd: int, timeout: float = 30.0) -> None:
        """Give QEMU a duplicate of `fd` under `name` (then usable as `fd:NAME` in a URI)."""
        await self._send_fd("getfd", {"fdname": name}, fd, timeout)

    async def add_fd(self, fd: int, timeout: float = 30.0) -> int:
        """Put a duplicate of `fd` in a new fd set; its id (a command that takes a file name
        then opens `/dev/fdset/ID`, the host's file, never a path of QEMU's choosing)."""
        added = await self._send_fd("add-fd", {}, fd, timeout)
        return int(added["fdset-id"])

    async def _send_fd(
        self, command: str, arguments: dict[str, Any], fd: int, timeout: float
    ) -> Any:
        msg = json.dumps({"execute": command, "arguments": arguments}).encode() + b"\n"
        await self._writer.drain()  # nothing of ours may be queued behind the direct send
        transport_sock = self._writer.get_extra_info("socket")
        if transport_sock is None:
            raise QmpError("the QEMU monitor connection has no socket to pass a file over")
        # a duplicate of the transport's socket (same non-blocking mode): the buffer is empty, so
        # the small message goes at once; whatever did not fit follows through the writer
        with socket.socket(fileno=os.dup(transport_sock.fileno())) as sock:
            try:
                sent = socket.send_fds(sock, [msg], [fd])
            except OSError as exc:
                raise QmpError(f"passing a file to QEMU failed: {exc}") from exc
        if sent < len(msg):
            self._writer.write(msg[sent:])
        return await self._reply(command, timeout)

    async def _reply(self, command: str, timeout: float) -> Any:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.drain()
                while True:
                    reply = await self._read()
                    if "event" in reply:
                        self.events.append(reply)
                        continue
                    if "error" in reply:
                        err = reply["error"]
                        raise QmpError(f"QEMU refused {command}: {err.get('desc', err)}")
                    return reply.get("return")
        except TimeoutError as exc:
            raise QmpNoAnswer(f"QEMU did not answer {command} within {timeout:.0f}s") from exc
        except OSError as exc:
            raise QmpNoAnswer(f"QEMU monitor connection lost during {command}: {exc}") from exc

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


class Monitored(Protocol):
    """A QEMU process whose monitor can be dialled (what the state and block operations need)."""

    pid: int

    async def qmp(self, timeout: float = 10.0) -> QmpClient: ...

    def alive(self) -> bool: ...

    async def kill(self, timeout: float = 5.0) -> None: ...

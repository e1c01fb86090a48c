"""A small asyncio client for QEMU's monitor protocol (QMP) on a Unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from .errors import QmpError


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
            raise QmpError(f"QEMU did not answer {command} within {timeout:.0f}s") from exc
        except OSError as exc:
            raise QmpError(f"QEMU monitor connection lost during {command}: {exc}") from exc

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

"""``tcp`` streams: dial a TCP port inside the guest and relay bytes both ways; and `listening`,
whether a dial of a loopback port would reach a listener, asked of the kernel without dialling."""

from __future__ import annotations

import asyncio
import contextlib

from . import protocol as p
from .errors import AgentRequestError
from .stream import Send, Stream, param_int, param_str

CONNECT_TIMEOUT = 10.0
TCP_TABLE = "/proc/net/tcp"
_LISTEN = "0A"  # TCP_LISTEN, as the table writes a socket's state
_DIALLED = {"00000000", "0100007F"}  # 0.0.0.0 and 127.0.0.1, as the table writes them (x86)


def listening(port: int, table: str = TCP_TABLE) -> bool:
    """Whether this kernel's table of IPv4 sockets lists a listener on `port` that a dial of
    127.0.0.1 reaches (bound to 0.0.0.0 or 127.0.0.1), with no connection waiting in its accept
    queue: the kernel completes a dial to it by itself, so it answers as a dial would, without
    waking the service (a dial makes it accept, read nothing and close, while the first command
    runs). False means "not seen" (none, an IPv6 or other address only, a queue not drained, no
    table): the caller dials to know."""
    want = f"{port:04X}"
    try:
        with open(table) as f:
            next(f, None)  # the header
            for line in f:
                fields = line.split()
                if len(fields) < 5 or fields[3] != _LISTEN:
                    continue
                address, _, bound = fields[1].partition(":")
                waiting = fields[4].partition(":")[2]  # a listener's rx_queue: its accept queue
                if bound == want and address in _DIALLED and waiting.strip("0") == "":
                    return True
    except OSError:
        return False
    return False


class TcpStream(Stream):
    kind = "tcp"

    def __init__(self, stream_id: int, params: p.JsonDict, send: Send) -> None:
        super().__init__(stream_id, params, send)
        self._writer: asyncio.StreamWriter | None = None

    async def run(self) -> None:
        host = param_str(self.params, "host", "127.0.0.1")
        port = param_int(self.params, "port")
        if not 0 < port < 65536:
            raise AgentRequestError("bad_request", f"bad port {port}")
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                reader, writer = await asyncio.open_connection(host, port)
        except ConnectionRefusedError:
            raise AgentRequestError("connection_refused", f"{host}:{port} refused") from None
        except TimeoutError:
            raise AgentRequestError("connect_timeout", f"{host}:{port} timed out") from None
        except OSError as exc:
            raise AgentRequestError("connect_failed", f"{host}:{port}: {exc}") from None
        self._writer = writer
        self.send_msg("connected")
        upload = self.task(self._upload(writer))

        async def read(size: int) -> bytes:
            try:
                return await reader.read(size)
            except ConnectionError:
                return b""

        while await self.send_chunk_from(p.STDOUT, read):
            pass
        await upload
        self.send_msg("result")

    async def _upload(self, writer: asyncio.StreamWriter) -> None:
        broken = False
        while (data := await self.inbox.get()) is not None:
            if not broken:
                try:
                    writer.write(data)
                    await writer.drain()
                except ConnectionError:
                    broken = True
            self.consumed(len(data))
        if not broken and writer.can_write_eof():
            with contextlib.suppress(OSError):
                writer.write_eof()

    def cleanup(self) -> None:
        if self._writer is not None:
            self._writer.close()

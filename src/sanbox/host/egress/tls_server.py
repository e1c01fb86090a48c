"""The server side of TLS toward the guest, over memory BIOs: the proxy has already read the
ClientHello (to sniff its SNI) off the guest's asyncio stream, so TLS is driven by hand, fed those
bytes first. Reads go 64 KiB at a time, and only when TLS asks for more, so nothing piles up."""

from __future__ import annotations

import asyncio
import contextlib
import ssl

CHUNK = 64 * 1024
HANDSHAKE_TIMEOUT = 10.0


class TlsServerStream:
    """A decrypted byte stream over the guest's connection: `handshake`, then `read`, `write`,
    `drain`, `close`."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, context: ssl.SSLContext
    ) -> None:
        self._reader, self._writer = reader, writer
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)

    async def handshake(self, head: bytes, timeout: float = HANDSHAKE_TIMEOUT) -> None:
        """Complete the handshake begun by `head` (the ClientHello bytes already read); SSLError,
        ConnectionError or TimeoutError if the guest does not."""
        self._incoming.write(head)
        async with asyncio.timeout(timeout):
            while True:
                try:
                    self._tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    await self._fill()
                except ssl.SSLError:
                    self._flush()  # the alert tells the guest why
                    raise
        self._flush()
        await self._writer.drain()

    async def read(self, n: int = CHUNK) -> bytes:
        """Up to `n` decrypted bytes (at most 64 KiB); b"" at the end (close_notify or EOF)."""
        while True:
            try:
                data = self._tls.read(min(n, CHUNK))
            except ssl.SSLWantReadError:
                await self._fill()
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""
            self._flush()  # post-handshake messages (session tickets, key updates)
            return data

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._tls.write(view) :]
        self._flush()

    async def drain(self) -> None:
        await self._writer.drain()

    def close(self) -> None:
        """Send close_notify (best effort) and close the connection."""
        with contextlib.suppress(ssl.SSLError, ValueError):  # the guest's is not awaited
            self._tls.unwrap()
        self._flush()
        self._writer.close()

    def _flush(self) -> None:
        data = self._outgoing.read()
        if data and not self._writer.is_closing():
            self._writer.write(data)

    async def _fill(self) -> None:
        """Send what TLS has to say, then feed it the guest's next bytes."""
        if self._incoming.eof:
            raise ConnectionResetError("the guest closed the connection mid-record")
        self._flush()
        await self._writer.drain()
        data = await self._reader.read(CHUNK)
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()

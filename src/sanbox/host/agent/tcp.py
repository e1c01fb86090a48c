"""``TcpStream``: a TCP connection dialled from inside the guest, relayed over the agent."""

from __future__ import annotations

from sanbox.guest import protocol as p

from .channel import Channel
from .errors import RemoteError

CONNECT_TIMEOUT = 15.0


class TcpStream:
    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self._buffer = bytearray()
        self._eof = False
        self._write_closed = False

    @classmethod
    async def connected(cls, channel: Channel, *, ready: str = "connected") -> TcpStream:
        """Wait for the agent's ``ready`` message (an ``ssh`` stream says ``started``)."""
        try:
            body = await channel.next_msg(CONNECT_TIMEOUT)
            if body is None or body.get("type") != ready:
                raise RemoteError("bad_reply", f"unexpected reply to open: {body!r}")
        except BaseException:
            await channel.close()
            raise
        return cls(channel)

    async def read(self, n: int = 65536, *, timeout: float | None = None) -> bytes:
        """Up to ``n`` bytes; ``b""`` at end of stream."""
        while not self._buffer and not self._eof:
            frame = await self._channel.next(timeout)
            if frame is None or isinstance(frame, p.Eof):
                self._eof = True
            elif isinstance(frame, p.Data):
                self._buffer += frame.data
            elif isinstance(frame, p.Msg):
                self._channel.raise_if_error(frame.body)
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    async def write(self, data: bytes) -> None:
        await self._channel.send_data(p.STDIN, data)

    async def close_write(self) -> None:
        if not self._write_closed:
            self._write_closed = True
            await self._channel.send(p.Eof(self._channel.id, p.STDIN))

    async def close(self) -> None:
        await self._channel.close()

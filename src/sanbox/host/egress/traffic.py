"""Bytes a computer's egress carried upstream, counted by the kernel: every upstream connection's
TCP_INFO `bytes_acked` (sent and acknowledged) and `bytes_received`. Open connections are read as
they stand, a closing one is added to the total just before it closes, so a reading at any time
is everything carried so far (the usage meter samples it into the computer's interval)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Protocol

# struct tcp_info (linux/tcp.h): tcpi_bytes_acked and tcpi_bytes_received, u64 each, since 4.1
_BYTES_AT = 120
_INFO_SIZE = 136


class _Socket(Protocol):
    def getsockopt(self, level: int, option: int, length: int) -> bytes: ...


def carried(sock: _Socket) -> int:
    """Bytes sent (acknowledged) and received on a TCP socket; 0 if it cannot say."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _INFO_SIZE)
    except OSError:
        return 0
    if len(info) < _INFO_SIZE:
        return 0
    acked, received = struct.unpack_from("=QQ", info, _BYTES_AT)
    return int(acked + received)


class Traffic:
    """One computer's upstream bytes so far."""

    def __init__(self) -> None:
        self._closed = 0
        self._open: dict[int, _Socket] = {}

    def opened(self, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            self._open[id(writer)] = sock

    def closing(self, writer: asyncio.StreamWriter) -> None:
        sock = self._open.pop(id(writer), None)
        if sock is not None:
            with contextlib.suppress(OSError):
                self._closed += carried(sock)

    def total(self) -> int:
        return self._closed + sum(carried(s) for s in self._open.values())

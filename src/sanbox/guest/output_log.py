"""The held output of a kept process: a bounded log of its stdout and stderr (sans-IO).

Each byte a channel produced has an offset in that channel (0, 1, 2, ... since the process
started). The log keeps the newest bytes, at most ``limit`` of them, in the order they came,
across both channels. A reader attaches with the offsets it already has (``start(delivered)``)
and takes what follows (``take``); bytes it never got that the log no longer holds are ``lost``
and said so. While a reader is attached the log holds back a writer that would push out bytes
the reader has not taken (``room()``: the process waits, as on a full pipe); with no reader it
drops the oldest bytes instead, so a detached process never blocks on its output. Each piece
held costs ``OVERHEAD`` bytes of the limit besides its data.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

LIMIT = 1024 * 1024
OVERHEAD = 256  # what each held piece costs besides its bytes: a process writing a byte at a
# time holds fewer bytes, never more memory
MERGE = 16 * 1024  # a write joins the previous piece of its channel up to this size


@dataclass
class _Chunk:
    channel: int
    offset: int  # of data[0] in its channel
    data: bytes


class OutputLog:
    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._chunks: deque[_Chunk] = deque()
        self._size = 0
        self.total: dict[int, int] = {}  # bytes ever produced, by channel
        self._cursor: dict[int, int] | None = None  # next offset the reader wants, by channel

    # -- the writer (the process's pipes) ---------------------------------------------

    def room(self) -> int:
        """Bytes the writer may add now: with a reader attached, only what keeps its untaken
        bytes within the limit; with none, any amount (the oldest are dropped)."""
        if self._cursor is None:
            return self.limit
        held = sum(n + OVERHEAD for n in self._untaken() if n)
        return max(0, self.limit - held - OVERHEAD)

    def add(self, channel: int, data: bytes) -> None:
        if not data:
            return
        offset = self.total.get(channel, 0)
        self.total[channel] = offset + len(data)
        last = self._chunks[-1] if self._chunks else None
        if last is not None and last.channel == channel and len(last.data) < MERGE:
            last.data += data
        else:
            self._chunks.append(_Chunk(channel, offset, data))
            self._size += OVERHEAD
        self._size += len(data)
        self._trim()

    def _trim(self) -> None:
        while self._size > self.limit:
            head = self._chunks[0]
            excess = self._size - self.limit
            if excess >= len(head.data):
                self._chunks.popleft()
                self._size -= len(head.data) + OVERHEAD
            else:
                head.data = head.data[excess:]
                head.offset += excess
                self._size -= excess

    def first(self, channel: int) -> int:
        """The offset of the oldest byte of ``channel`` still held (its total if none is)."""
        for chunk in self._chunks:
            if chunk.channel == channel:
                return chunk.offset
        return self.total.get(channel, 0)

    # -- the reader (an attached stream) ----------------------------------------------

    def start(self, delivered: dict[int, int]) -> dict[int, int]:
        """Attach a reader that already has ``delivered[channel]`` bytes of each channel;
        returns the bytes it missed that are no longer held, by channel (only channels with a
        loss). Offsets beyond what was produced count as all of it."""
        cursor: dict[int, int] = {}
        lost: dict[int, int] = {}
        for channel in {*self.total, *delivered}:
            have = min(max(0, delivered.get(channel, 0)), self.total.get(channel, 0))
            first = self.first(channel)
            if have < first:
                lost[channel] = first - have
                have = first
            cursor[channel] = have
        self._cursor = cursor
        return lost

    def stop(self) -> None:
        """The reader left: bytes it did not take stay held (dropped oldest first past the
        limit)."""
        self._cursor = None

    @property
    def attached(self) -> bool:
        return self._cursor is not None

    def _wanted(self, chunk: _Chunk) -> int:
        """How many bytes at the start of ``chunk`` the reader already has."""
        assert self._cursor is not None
        return min(len(chunk.data), max(0, self._cursor.get(chunk.channel, 0) - chunk.offset))

    def _untaken(self) -> list[int]:
        return [len(c.data) - self._wanted(c) for c in self._chunks]

    def pending(self) -> int:
        """Bytes held that the attached reader has not taken (0 with no reader)."""
        if self._cursor is None:
            return 0
        return sum(self._untaken())

    def take(self, most: int) -> tuple[int, bytes] | None:
        """The reader's next piece, at most ``most`` bytes of one channel, in the order the
        bytes came; None if it has everything held."""
        if self._cursor is None or most <= 0:
            return None
        for chunk in self._chunks:
            skip = self._wanted(chunk)
            if skip < len(chunk.data):
                piece = chunk.data[skip : skip + most]
                self._cursor[chunk.channel] = chunk.offset + skip + len(piece)
                return chunk.channel, piece
        return None

"""``Inbox``: what one stream received and its reader has not taken yet, bounded (sans-IO).

The agent may send a stream at most the credit the host granted it as DATA: ``INITIAL_WINDOW``
plus every WINDOW frame the host wrote (``allow``). The inbox counts DATA as it arrives, so what
waits here never exceeds the window, and a guest that sends beyond its credit breaks the
protocol (``ProtocolError``: the connection is dropped). Other queued frames (MSG, EOF) are few
on a well-behaved stream; more than ``MAX_CONTROL_FRAMES`` waiting is a violation too.

DATA frames of one channel are joined while nothing else arrives between them (up to
``JOIN_LIMIT`` bytes a piece), so a guest sending one-byte frames cannot turn the window's bytes
into a million queued objects. Joining can move a channel's bytes ahead of another channel's
that arrived earlier (stdout before stderr): their relative order was never defined, as they are
separate pipes in the guest. Nothing moves across MSG or EOF.
"""

from __future__ import annotations

from collections import deque

from sanbox.guest import protocol as p

from .errors import ProtocolError

MAX_CONTROL_FRAMES = 16
JOIN_LIMIT = p.CHUNK


class _Chunk:
    """DATA of one channel, joined."""

    __slots__ = ("channel", "data", "stream")

    def __init__(self, frame: p.Data) -> None:
        self.stream = frame.stream
        self.channel = frame.channel
        self.data = bytearray(frame.data)


class Inbox:
    def __init__(
        self, window: int = p.INITIAL_WINDOW, max_control: int = MAX_CONTROL_FRAMES
    ) -> None:
        self._items: deque[_Chunk | p.Frame] = deque()
        self._joinable: dict[int, _Chunk] = {}
        self._allowed = window  # DATA bytes the agent may have sent on this stream in all
        self._received = 0
        self._control = 0
        self._max_control = max_control

    def __len__(self) -> int:
        return len(self._items)

    @property
    def buffered(self) -> int:
        """DATA bytes waiting (at most the window granted)."""
        return sum(len(item.data) for item in self._items if isinstance(item, _Chunk))

    @property
    def window_left(self) -> int:
        """DATA bytes the agent may still send (what the host granted, less what came)."""
        return self._allowed - self._received

    def allow(self, credit: int) -> None:
        """The host granted ``credit`` more bytes (a WINDOW frame was written)."""
        self._allowed += credit

    def put(self, frame: p.Frame) -> None:
        """Queue a frame from the agent; ``ProtocolError`` if it breaks the stream's bounds."""
        if isinstance(frame, p.Data):
            self._received += len(frame.data)
            if self._received > self._allowed:
                raise ProtocolError(
                    f"stream {frame.stream}: the agent sent {self._received} bytes of DATA with "
                    f"a window of {self._allowed}"
                )
            chunk = self._joinable.get(frame.channel)
            if chunk is not None and len(chunk.data) + len(frame.data) <= JOIN_LIMIT:
                chunk.data += frame.data
                return
            chunk = _Chunk(frame)
            self._items.append(chunk)
            self._joinable[frame.channel] = chunk
            return
        if self._control >= self._max_control:
            raise ProtocolError(
                f"stream {frame.stream}: more than {self._max_control} frames other than DATA "
                "waiting"
            )
        self._control += 1
        self._joinable.clear()  # DATA after this frame must stay after it
        self._items.append(frame)

    def pop(self) -> p.Frame:
        """The oldest item (joined DATA comes out as one ``Data`` frame)."""
        item = self._items.popleft()
        if isinstance(item, _Chunk):
            if self._joinable.get(item.channel) is item:
                del self._joinable[item.channel]
            return p.Data(item.stream, item.channel, bytes(item.data))
        self._control -= 1
        return item

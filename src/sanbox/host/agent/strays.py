"""``Strays``: frames the guest sends for a stream the client has no channel for (sans-IO).

A stream the host closed gets the frames the guest sent before it read the CLOSE: they race,
and are dropped. They are bounded by what the guest could still send on the stream: DATA within
the window it had left, and ``MAX_CONTROL_FRAMES`` others (an exit, EOFs, a few WINDOWs; its
CLOSE is its last word). Anything past that, or a frame for a stream that is not one of the last
``REMEMBERED`` the host closed (one it never opened, or one the guest already closed), costs
the host decoding for nothing, so it is a ``ProtocolError``: the connection is dropped.
"""

from __future__ import annotations

from collections import OrderedDict

from sanbox.guest import protocol as p

from .errors import ProtocolError
from .inbox import MAX_CONTROL_FRAMES

REMEMBERED = 1024  # streams closed by the host whose late frames are still expected


class _Due:
    """What the guest may still send on one stream the host closed."""

    __slots__ = ("control", "data")

    def __init__(self, data: int) -> None:
        self.data = data
        self.control = MAX_CONTROL_FRAMES


class Strays:
    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._due: OrderedDict[int, _Due] = OrderedDict()
        self._remembered = remembered

    def closed(self, stream: int, window_left: int) -> None:
        """The host closed `stream` with `window_left` bytes of DATA still granted to the guest."""
        self._due[stream] = _Due(window_left)
        self._due.move_to_end(stream)
        if len(self._due) > self._remembered:
            self._due.popitem(last=False)

    def arrived(self, frame: p.Frame) -> None:
        """Account for (and drop) `frame`, whose stream has no channel; ``ProtocolError`` if the
        guest cannot have sent it in a race with the host's CLOSE."""
        due = self._due.get(frame.stream)
        if due is None:
            raise ProtocolError(f"a frame for stream {frame.stream}, which is not open")
        if isinstance(frame, p.Close):
            del self._due[frame.stream]
            return
        if isinstance(frame, p.Data):
            due.data -= max(1, len(frame.data))  # an empty DATA is never free
        else:
            due.control -= 1
        if due.data < 0 or due.control < 0:
            raise ProtocolError(
                f"stream {frame.stream}: more frames after it was closed than the guest could send"
            )

"""View-only enforced by the server: the client side of an RFB (VNC) stream, parsed message by
message, with every input message dropped (key, pointer, clipboard, QEMU's extended keys,
desktop resizes). A page that sets noVNC's `viewOnly` only asks; this is what makes watching
read-only. Anything the parser does not know ends the stream (`RfbRefused`), so nothing
unparsed ever reaches the guest.

The handshake it accepts is the one the browser type's Xvnc offers (RFB 3.8, security type
None); the client's ClientInit is forced to `shared` so a watcher never disconnects others."""

from __future__ import annotations

VERSION = 12  # "RFB 003.008\n"
SECURITY_NONE = 1
# client message type -> (fixed length, length of the count field after it, bytes per counted)
ALLOWED = {
    0: (20, None),  # SetPixelFormat
    2: (4, (2, 2, 4)),  # SetEncodings: u16 count at offset 2, 4 bytes each
    3: (10, None),  # FramebufferUpdateRequest
    150: (10, None),  # EnableContinuousUpdates
    248: (9, (8, 1, 1)),  # ClientFence: u8 length at offset 8
}
DROPPED = {
    4: (8, None),  # KeyEvent
    5: (6, None),  # PointerEvent
    6: (8, (4, 4, 1)),  # ClientCutText: u32 length at offset 4
    251: (8, (6, 1, 16)),  # SetDesktopSize: u8 screens at offset 6, 16 bytes each
}
MAX_MESSAGE = 1 << 20  # a client message longer than this ends the stream


class RfbRefused(Exception):
    pass


class ViewOnly:
    """Feed the client's bytes in; get back the bytes that may go to the guest."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._stage = "version"

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out = bytearray()
        while True:
            taken = self._step(out)
            if taken == 0:
                break
            del self._buffer[:taken]
        if len(self._buffer) > MAX_MESSAGE:
            raise RfbRefused("a client message is too long")
        return bytes(out)

    def _step(self, out: bytearray) -> int:
        buf = self._buffer
        if self._stage == "version":
            if len(buf) < VERSION:
                return 0
            if not bytes(buf[:VERSION]).startswith(b"RFB 003.00"):
                raise RfbRefused("not an RFB client")
            out += buf[:VERSION]
            self._stage = "security"
            return VERSION
        if self._stage == "security":
            if not buf:
                return 0
            if buf[0] != SECURITY_NONE:
                raise RfbRefused("only the security type None is relayed")
            out.append(SECURITY_NONE)
            self._stage = "init"
            return 1
        if self._stage == "init":
            if not buf:
                return 0
            out.append(1)  # shared: watching never disconnects the others
            self._stage = "messages"
            return 1
        return self._message(out)

    def _message(self, out: bytearray) -> int:
        buf = self._buffer
        if not buf:
            return 0
        kind = buf[0]
        shape = ALLOWED.get(kind) or DROPPED.get(kind)
        if shape is None:
            raise RfbRefused(f"client message type {kind} is not relayed")
        fixed, counted = shape
        if len(buf) < fixed:
            return 0
        size = fixed
        if counted is not None:
            offset, width, each = counted
            count = int.from_bytes(buf[offset : offset + width], "big")
            size += count * each
        if size > MAX_MESSAGE:
            raise RfbRefused("a client message is too long")
        if len(buf) < size:
            return 0
        if kind in ALLOWED:
            out += buf[:size]
        return size

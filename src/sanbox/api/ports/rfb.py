"""View-only VNC: the client's half of an RFB (VNC) connection with its input taken out.

A browser computer's noVNC page talks RFB to the guest's VNC server through websockify, whose
binary WebSocket messages carry the RFB byte stream in pieces of any size. `RfbViewOnly` is
sans-IO: `feed(bytes)` takes the next piece of what the client sent and returns what may go on
to the guest. The handshake passes (the 12-byte ProtocolVersion, exactly `RFB 003.007` or
`RFB 003.008`; the security type, None (1) or VNC authentication (2) and its 16-byte
response; the 1-byte ClientInit); then messages are framed by type:

- passed: 0 SetPixelFormat, 2 SetEncodings, 3 FramebufferUpdateRequest,
  150 EnableContinuousUpdates, 248 ClientFence (what a viewer needs to see the screen);
- dropped: 4 KeyEvent, 5 PointerEvent, 6 ClientCutText (however long its text), 251
  SetDesktopSize (input, and changes to the guest's screen);
- anything else (a type whose length is not known here, a security type that is neither, RFB
  3.3 whose security the server alone chooses) raises `RfbRefusedError`: the relay closes the
  connection rather than pass bytes it cannot frame.

Nothing is buffered beyond one message's fixed part (SetEncodings' count is at most 65535
encodings, 256 KiB), so memory stays bounded whatever the client sends.
"""

from __future__ import annotations

import struct

VERSION_BYTES = 12
VERSIONS = frozenset({b"RFB 003.007\n", b"RFB 003.008\n"})  # exactly these: framed as the server
SECURITY_NONE, SECURITY_VNC = 1, 2
VNC_RESPONSE_BYTES = 16
PASSED = frozenset({0, 2, 3, 150, 248})
DROPPED = frozenset({4, 5, 6, 251})
_FIXED = {0: 20, 3: 10, 4: 8, 5: 6, 150: 10}  # message type -> whole length


class RfbRefusedError(Exception):
    """The client sent something a view-only connection cannot let through."""


class RfbViewOnly:
    def __init__(self) -> None:
        self._buffer = bytearray()
        self._stage = "version"
        self._skip = 0  # bytes of a dropped message still to come (a long ClientCutText)

    def feed(self, data: bytes) -> bytes:
        """What of `data` (the next bytes from the client) may go on to the guest."""
        out = bytearray()
        if self._skip:
            skipped = min(self._skip, len(data))
            self._skip -= skipped
            data = data[skipped:]
        self._buffer += data
        while self._buffer:
            need = self._next(out)
            if need is None:
                break
        return bytes(out)

    def _take(self, n: int) -> bytes | None:
        if len(self._buffer) < n:
            return None
        chunk = bytes(self._buffer[:n])
        del self._buffer[:n]
        return chunk

    def _next(self, out: bytearray) -> bool | None:
        """Consume one unit of the stream into `out` (or drop it); None when more is needed."""
        if self._stage == "version":
            version = self._take(VERSION_BYTES)
            if version is None:
                return None
            if not version.startswith(b"RFB ") or version[7:8] != b"." or version[-1:] != b"\n":
                raise RfbRefusedError("not an RFB client")
            if version not in VERSIONS:  # the server reads any other (`RFB 003.1xx`, ` 03.007`)
                # its own way, as 3.3 say, where no security byte follows: framed one byte
                # apart from it, a message's body passed here would be input there
                raise RfbRefusedError("only RFB 3.7 and 3.8 are supported view-only")
            out += version
            self._stage = "security"
            return True
        if self._stage == "security":
            kind = self._take(1)
            if kind is None:
                return None
            if kind[0] not in (SECURITY_NONE, SECURITY_VNC):
                raise RfbRefusedError(f"security type {kind[0]} is not supported view-only")
            out += kind
            self._stage = "auth" if kind[0] == SECURITY_VNC else "init"
            return True
        if self._stage == "auth":
            response = self._take(VNC_RESPONSE_BYTES)
            if response is None:
                return None
            out += response
            self._stage = "init"
            return True
        if self._stage == "init":
            shared = self._take(1)
            if shared is None:
                return None
            out += shared
            self._stage = "messages"
            return True
        return self._message(out)

    def _message(self, out: bytearray) -> bool | None:
        kind = self._buffer[0]
        if kind not in PASSED and kind not in DROPPED:
            raise RfbRefusedError(f"client message type {kind} is not allowed view-only")
        length = self._length(kind)
        if length is None:
            return None
        if kind == 6:  # ClientCutText: drop its text as it streams in, never hold it
            held = min(length, len(self._buffer))
            del self._buffer[:held]
            self._skip = length - held
            return True
        message = self._take(length)
        if message is None:
            return None
        if kind in PASSED:
            out += message
        return True

    def _length(self, kind: int) -> int | None:
        """The whole length of the message at the front, or None until its header is here."""
        if kind in _FIXED:
            return _FIXED[kind]
        header = {2: 4, 6: 8, 248: 9, 251: 8}[kind]
        if len(self._buffer) < header:
            return None
        if kind == 2:
            return 4 + 4 * int(struct.unpack_from(">H", self._buffer, 2)[0])
        if kind == 6:
            return 8 + int(struct.unpack_from(">I", self._buffer, 4)[0])
        if kind == 248:
            return 9 + self._buffer[8]
        return 8 + 16 * self._buffer[6]  # SetDesktopSize: its screens

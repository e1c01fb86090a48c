"""Wire protocol between the host and the guest agent: a sans-IO codec.

The byte stream is a sequence of frames, optionally interleaved with a 16-byte
sync marker (``SYNC``) between frames. Each frame is a 12-byte header followed
by a payload::

    magic "SB" (2) | type (u8) | reserved (u8) | stream id (u32 BE) | length (u32 BE)

A sender writes ``SYNC`` before its first frame (host: before HELLO; agent: before
HELLO_ACK). A ``Decoder`` that is hunting discards bytes until it finds ``SYNC``;
it hunts at startup, after ``reset()`` and, in lenient mode, after malformed input.

Payloads by type:

- HELLO / HELLO_ACK / OPEN / MSG: a UTF-8 JSON object, nested at most ``MAX_JSON_DEPTH`` deep.
- DATA: one channel byte (0 stdin, 1 stdout, 2 stderr) then the bytes.
- EOF: one channel byte.
- WINDOW: a u32 credit increment (bytes of DATA the receiver may send more).
- CLOSE: empty.

Flow control is SSH-style: each side may send at most ``INITIAL_WINDOW`` bytes of
DATA on a stream, plus what the peer granted with WINDOW frames since.

Every payload is at most ``MAX_PAYLOAD`` bytes, checked from the header before it is buffered.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MAGIC = b"SB"
SYNC = b"\x7fSANBOX\x00SYNC\x00\x01\xfe\xff"
assert len(SYNC) == 16 and SYNC[:2] != MAGIC
HEADER = struct.Struct(">2sBBII")
MAX_PAYLOAD = 256 * 1024
CHUNK = 64 * 1024
INITIAL_WINDOW = 1024 * 1024
MAX_JSON_DEPTH = 32
PROTOCOL_VERSION = 3  # a host checks before using: 2 kept processes (guest/kept.py), 3 `watch`
AGENT_VERSION = "0.1.0"

STDIN = 0
STDOUT = 1
STDERR = 2

JsonDict = dict[str, Any]


class ProtocolError(Exception):
    """Malformed bytes on the wire: bad magic, unknown type, oversize or bad payload."""


class PayloadError(ProtocolError):
    """A well-framed frame whose payload is invalid; the stream stays in sync."""


class FrameType(enum.IntEnum):
    HELLO = 1
    HELLO_ACK = 2
    OPEN = 3
    DATA = 4
    EOF = 5
    MSG = 6
    WINDOW = 7
    CLOSE = 8


@dataclass(frozen=True)
class Hello:
    body: JsonDict
    stream: int = 0


@dataclass(frozen=True)
class HelloAck:
    body: JsonDict
    stream: int = 0


@dataclass(frozen=True)
class Open:
    stream: int
    kind: str
    params: JsonDict = field(default_factory=dict)


@dataclass(frozen=True)
class Data:
    stream: int
    channel: int
    data: bytes


@dataclass(frozen=True)
class Eof:
    stream: int
    channel: int


@dataclass(frozen=True)
class Msg:
    stream: int
    body: JsonDict


@dataclass(frozen=True)
class Window:
    stream: int
    credit: int


@dataclass(frozen=True)
class Close:
    stream: int


Frame = Hello | HelloAck | Open | Data | Eof | Msg | Window | Close


def _json(body: JsonDict) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _payload(frame: Frame) -> tuple[FrameType, bytes]:
    match frame:
        case Hello(body=body):
            return FrameType.HELLO, _json(body)
        case HelloAck(body=body):
            return FrameType.HELLO_ACK, _json(body)
        case Open(kind=kind, params=params):
            return FrameType.OPEN, _json({**params, "kind": kind})
        case Data(channel=channel, data=data):
            return FrameType.DATA, bytes([channel]) + data
        case Eof(channel=channel):
            return FrameType.EOF, bytes([channel])
        case Msg(body=body):
            return FrameType.MSG, _json(body)
        case Window(credit=credit):
            return FrameType.WINDOW, struct.pack(">I", credit)
        case Close():
            return FrameType.CLOSE, b""
    raise TypeError(f"not a frame: {frame!r}")


def encode(frame: Frame) -> bytes:
    """Serialize one frame. Raises ``ValueError`` if the payload is too large."""
    ftype, payload = _payload(frame)
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    if not 0 <= frame.stream <= 0xFFFFFFFF:
        raise ValueError(f"stream id out of range: {frame.stream}")
    return HEADER.pack(MAGIC, ftype, 0, frame.stream, len(payload)) + payload


def _too_deep(value: object, limit: int) -> bool:
    """Whether ``value`` nests containers more than ``limit`` deep (iterative: no recursion)."""
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


def _load_json(payload: bytes) -> JsonDict:
    """A JSON object from a peer that may be hostile: nesting deeper than ``MAX_JSON_DEPTH`` is a
    ``ProtocolError`` (``json.loads`` alone would raise ``RecursionError`` on deep input)."""
    try:
        body = json.loads(payload)
    except RecursionError:
        raise ProtocolError(f"JSON payload nested deeper than {MAX_JSON_DEPTH}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"bad JSON payload: {exc}") from exc
    if not isinstance(body, dict):
        raise ProtocolError("JSON payload is not an object")
    # fewer brackets than the limit cannot nest deeper: skip the walk for ordinary messages
    if payload.count(b"[") + payload.count(b"{") > MAX_JSON_DEPTH and _too_deep(
        body, MAX_JSON_DEPTH
    ):
        raise ProtocolError(f"JSON payload nested deeper than {MAX_JSON_DEPTH}")
    return body


def decode_payload(ftype: int, stream: int, payload: bytes) -> Frame:
    """Build a frame from a header's type and stream id and its payload."""
    try:
        kind = FrameType(ftype)
    except ValueError:
        raise ProtocolError(f"unknown frame type {ftype}") from None
    if kind is FrameType.HELLO:
        return Hello(_load_json(payload), stream)
    if kind is FrameType.HELLO_ACK:
        return HelloAck(_load_json(payload), stream)
    if kind is FrameType.OPEN:
        params = _load_json(payload)
        open_kind = params.pop("kind", None)
        if not isinstance(open_kind, str):
            raise ProtocolError("OPEN without a string 'kind'")
        return Open(stream, open_kind, params)
    if kind is FrameType.DATA:
        if not payload:
            raise ProtocolError("DATA without a channel byte")
        return Data(stream, payload[0], payload[1:])
    if kind is FrameType.EOF:
        if len(payload) != 1:
            raise ProtocolError("EOF payload must be one channel byte")
        return Eof(stream, payload[0])
    if kind is FrameType.MSG:
        return Msg(stream, _load_json(payload))
    if kind is FrameType.WINDOW:
        if len(payload) != 4:
            raise ProtocolError("WINDOW payload must be 4 bytes")
        return Window(stream, struct.unpack(">I", payload)[0])
    if payload:
        raise ProtocolError("CLOSE payload must be empty")
    return Close(stream)


class Decoder:
    """Incremental frame decoder.

    ``feed(data)`` returns the frames completed so far. In strict mode (the
    default) malformed input raises ``ProtocolError`` and the decoder starts
    hunting for ``SYNC``; in lenient mode (``lenient=True``) it records the error
    in ``errors``, drops bytes and hunts for ``SYNC`` itself. A decoder starts
    hunting unless ``synced=True``.
    """

    def __init__(self, *, lenient: bool = False, synced: bool = False) -> None:
        self.lenient = lenient
        self.errors: list[ProtocolError] = []
        self._buf = bytearray()
        self._hunting = not synced

    @property
    def hunting(self) -> bool:
        return self._hunting

    def reset(self) -> None:
        """Drop buffered bytes and hunt for the next ``SYNC``."""
        self._buf.clear()
        self._hunting = True

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        while True:
            try:
                frame = self._next()
            except ProtocolError as exc:
                if not isinstance(exc, PayloadError):
                    self._hunting = True
                    del self._buf[:1]  # never find the same bad frame again
                if not self.lenient:
                    raise
                self.errors.append(exc)
                continue
            if frame is None:
                return frames
            frames.append(frame)

    def _hunt(self) -> bool:
        idx = self._buf.find(SYNC)
        if idx < 0:
            # keep a tail that may be the start of a marker split across feeds
            keep = len(SYNC) - 1
            if len(self._buf) > keep:
                del self._buf[: len(self._buf) - keep]
            return False
        del self._buf[: idx + len(SYNC)]
        self._hunting = False
        return True

    def _next(self) -> Frame | None:
        while True:
            if self._hunting and not self._hunt():
                return None
            buf = self._buf
            if len(buf) < 2:
                return None
            if buf[:2] == SYNC[:2]:
                if len(buf) < len(SYNC):
                    return None
                if buf[: len(SYNC)] != SYNC:
                    raise ProtocolError("bad sync marker")
                del buf[: len(SYNC)]
                continue
            if buf[:2] != MAGIC:
                raise ProtocolError(f"bad magic {bytes(buf[:2])!r}")
            if len(buf) < HEADER.size:
                return None
            _, ftype, _, stream, length = HEADER.unpack_from(buf)
            if length > MAX_PAYLOAD:
                raise ProtocolError(f"frame length {length} exceeds {MAX_PAYLOAD}")
            if ftype not in FrameType._value2member_map_:
                raise ProtocolError(f"unknown frame type {ftype}")
            end = HEADER.size + length
            if len(buf) < end:
                return None
            payload = bytes(buf[HEADER.size : end])
            del buf[:end]
            try:
                return decode_payload(ftype, stream, payload)
            except ProtocolError as exc:
                raise PayloadError(str(exc)) from exc


def path_problem(path: object) -> str | None:
    """Why ``path`` is not acceptable as a guest path (``None`` if it is).

    Guest paths are absolute, non-empty strings without NUL bytes or ``..`` components.
    """
    if not isinstance(path, str) or not path:
        return "path must be a non-empty string"
    if not path.startswith("/"):
        return f"path must be absolute: {path!r}"
    if "\x00" in path:
        return "path must not contain NUL bytes"
    if ".." in path.split("/"):
        return f"path must not contain '..': {path!r}"
    return None

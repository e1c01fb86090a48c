"""The Connect protocol's framing with the JSON codec, as E2B's SDK speaks it to envd, sans-IO.

Unary calls are a JSON body each way (`application/json`); an error is a non-2xx status with
`{"code", "message"}`. Server streams (`application/connect+json`) are envelopes: a flags byte,
a big-endian u32 length, then that many bytes of JSON; the last envelope has the end-stream flag
(0x02) and carries `{}` or `{"error": {"code", "message"}}`. A client stream (StreamInput) sends
its messages in envelopes until its body ends, and is answered as a server stream is: its one
message, then the end. Bytes fields are base64, 64-bit integers strings, enums their names."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

UNARY_TYPE = "application/json"
STREAM_TYPE = "application/connect+json"
END_STREAM = 0x02
COMPRESSED = 0x01
MAX_MESSAGE = 4 * 2**20  # bytes of one request message

# Connect error codes and the HTTP status a unary error answers with (connectrpc.com/docs)
STATUS: dict[str, int] = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}


class ConnectError(Exception):
    """An error answered in Connect's shape: a code of `STATUS` and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code if code in STATUS else "unknown"

    @property
    def message(self) -> str:
        return str(self)

    @property
    def status(self) -> int:
        return STATUS[self.code]

    def body(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def _json(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = _json(message)
    return struct.pack(">BI", flags, len(data)) + data


def end_stream(error: ConnectError | None = None) -> bytes:
    return envelope({"error": error.body()} if error is not None else {}, END_STREAM)


@dataclass(frozen=True)
class Envelope:
    flags: int
    message: dict[str, Any]

    @property
    def end(self) -> bool:
        return bool(self.flags & END_STREAM)


class EnvelopeReader:
    """Bytes in, envelopes out: `feed()` returns the envelopes completed so far."""

    def __init__(self, limit: int = MAX_MESSAGE) -> None:
        self._buffer = bytearray()
        self._limit = limit

    def feed(self, data: bytes) -> list[Envelope]:
        self._buffer += data
        out: list[Envelope] = []
        while len(self._buffer) >= 5:
            flags, size = struct.unpack(">BI", self._buffer[:5])
            if size > self._limit:
                raise ConnectError("resource_exhausted", f"a message of {size} bytes is too big")
            if flags & COMPRESSED:
                raise ConnectError("internal", "compressed messages are not accepted")
            if len(self._buffer) < 5 + size:
                break
            raw = bytes(self._buffer[5 : 5 + size])
            del self._buffer[: 5 + size]
            out.append(Envelope(flags, decode(raw)))
        return out

    @property
    def pending(self) -> int:
        return len(self._buffer)


def decode(raw: bytes) -> dict[str, Any]:
    """A request message: a JSON object (an empty body is the empty message)."""
    if not raw.strip():
        return {}
    try:
        message = json.loads(raw)
    except ValueError:
        raise ConnectError("invalid_argument", "the message is not JSON") from None
    if not isinstance(message, dict):
        raise ConnectError("invalid_argument", "the message is not a JSON object")
    return message


def first_message(body: bytes, content_type: str) -> dict[str, Any]:
    """The request message of a unary call (its body) or of a server stream (one envelope)."""
    if len(body) > MAX_MESSAGE + 5:
        raise ConnectError("resource_exhausted", "the request is too big")
    if content_type.split(";")[0].strip().lower() != STREAM_TYPE:
        return decode(body)
    reader = EnvelopeReader()
    envelopes = reader.feed(body)
    if len(envelopes) != 1 or reader.pending:
        raise ConnectError("invalid_argument", "a server stream's request is one envelope")
    return envelopes[0].message

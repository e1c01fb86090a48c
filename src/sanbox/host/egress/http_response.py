"""The upstream's answer to a computer's checked plain-HTTP request, read just far enough to relay
it (sans-IO: bytes in, a head out). Nothing in an answer is checked for the egress policy (what
leaves is the request, checked in `http_request.py`); the answer is read only for where its head
ends, what the computer gets told about the connection, and where its body ends.

- `read_head`: the status line and header lines at the start of a buffer (at most `MAX_HEAD`),
  refused as broken when they are not HTTP/1.x: no status line, a bare CR or LF, a line
  without a colon, obsolete line folding, Content-Length values that disagree.
- `ResponseHead.for_guest`: the head as the computer gets it, `Connection: close` (one request a
  connection); an informational one (100, 101) goes as it came (a 101 only to a request that
  asked for an upgrade: `relay.Exchange` calls any other broken).
- `ResponseHead.body`: how its body is framed: none, a known length, or until the upstream
  closes (chunked or unframed: the request told the upstream `Connection: close`, so it ends
  the connection after its answer; the idle timeout ends one that does not)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .http_request import HOP_BY_HOP, MAX_HEAD, bare, header_fields
from .sniff import INCOMPLETE, Incomplete

STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: [^\r\n]*)?")
NO_BODY: Final = 0  # `body`: none follows the head
UNTIL_CLOSE: Final = -1  # `body`: everything until the upstream closes


class BrokenAnswerError(Exception):
    """The upstream's answer is not an HTTP/1.x response: the computer gets a 502."""


@dataclass(frozen=True)
class ResponseHead:
    status: int
    status_line: bytes
    fields: list[tuple[bytes, bytes]]  # (name as sent, value without surrounding blanks)
    size: int  # bytes of the head, its blank line included

    @property
    def informational(self) -> bool:
        return 100 <= self.status < 200

    def for_guest(self) -> bytes:
        """The head the computer gets: a final answer without the upstream's hop-by-hop fields
        and with `Connection: close`; an informational one as it came."""
        fields = self.fields
        if not self.informational:
            fields = [(n, v) for n, v in fields if n.lower() not in HOP_BY_HOP]
            fields.append((b"Connection", b"close"))
        lines = [self.status_line, *(n + b": " + v for n, v in fields)]
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def body(self, head_request: bool) -> int:
        """The body's length in bytes, NO_BODY, or UNTIL_CLOSE (RFC 9112 6.3)."""
        if head_request or self.informational or self.status in (204, 304):
            return NO_BODY
        if any(n.lower() == b"transfer-encoding" for n, _ in self.fields):
            return UNTIL_CLOSE
        lengths = {
            v.strip()
            for n, v in self.fields
            if n.lower() == b"content-length"
            for v in v.split(b",")
        }
        if not lengths:
            return UNTIL_CLOSE
        if len(lengths) > 1 or not all(v.isdigit() for v in lengths):
            raise BrokenAnswerError(f"a malformed Content-Length: {sorted(lengths)!r}")
        return int(lengths.pop())


def read_head(buf: bytes) -> ResponseHead | Incomplete:
    """The response head at the start of `buf` (INCOMPLETE: read more); BrokenAnswerError if
    it is not one."""
    end = buf.find(b"\r\n\r\n", 0, MAX_HEAD)
    if end < 0:
        if len(buf) >= MAX_HEAD:
            raise BrokenAnswerError(f"a response head over {MAX_HEAD // 1024} KiB")
        if not b"HTTP/1.".startswith(buf[:7]):
            raise BrokenAnswerError("not an HTTP/1.x response")
        return INCOMPLETE
    if bare(buf[:end]):
        raise BrokenAnswerError("a bare CR or LF in the response head")
    status_line, *lines = buf[:end].split(b"\r\n")
    match = STATUS_LINE.fullmatch(status_line)
    if match is None:
        raise BrokenAnswerError("not an HTTP/1.x status line")
    fields = header_fields(lines)
    if isinstance(fields, str):
        raise BrokenAnswerError(f"{fields} in the response head")
    return ResponseHead(int(match.group(1)), status_line, fields, end + 4)

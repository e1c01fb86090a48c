"""One HTTP/1.1 request and its response over a plain TCP connection (`Connection: close`): all
the quick commands (sanbox.cli.calls) need of HTTP. The standard library's http.client loads the
email package and ssl to do the same: ~0.03 s of a command the server answers in milliseconds.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

from ..sdk.errors import ERROR_BODY_LIMIT

CHUNK = 65536
HEAD_LIMIT = 64 * 1024  # an answer's status line and headers
Sink = Callable[[bytes], object]
"""Takes a successful answer's body a piece at a time as it arrives (`sanbox cp` of a guest's
file: its local file), so no more than a read's worth is held."""


class Unreached(Exception):
    """No connection could be made: nothing was sent."""


class Broken(Exception):
    """The connection failed, or what came back was not HTTP, after the request was sent."""


def exchange(
    host: str, port: int, head: bytes, body: bytes, timeout: float, sink: Sink | None = None
) -> tuple[int, bytes]:
    """Send `head` (request line and headers, `Connection: close` among them) and `body`; the
    answer's status and body (with `sink`, a successful body goes there instead, a read at a
    time however it is framed, and b"" is returned). TimeoutError when the server takes longer than
    `timeout` seconds to connect or to send anything."""
    try:
        address = (_name(host), port)  # getaddrinfo takes bytes as well (typeshed says str)
        connection = socket.create_connection(address, timeout)  # type: ignore[arg-type]
    except TimeoutError:
        raise
    except OSError as exc:
        raise Unreached(str(exc)) from exc
    with connection:
        try:
            connection.sendall(head + body)
            return _response(_Reader(connection), None if sink is None else _Local.guard(sink))
        except TimeoutError:
            raise
        except _Local as exc:  # the sink's own (a local file's): not the connection's
            raise exc.error from None
        except (OSError, ValueError, IndexError) as exc:
            raise Broken(str(exc) or type(exc).__name__) from exc


class _Local(Exception):
    """A sink's OSError, carried past the handler that reads every other one as the
    connection's."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error

    @staticmethod
    def guard(sink: Sink) -> Sink:
        def write(piece: bytes) -> None:
            try:
                sink(piece)
            except OSError as exc:
                raise _Local(exc) from exc

        return write


def _name(host: str) -> str | bytes:
    """The host as getaddrinfo takes it: an ASCII name or address as bytes, which it uses as they
    are (a str it encodes with the IDNA codec, loading `encodings.idna` and `stringprep`: ~1 ms),
    any other name as it is."""
    return host.encode() if host.isascii() else host


class _Reader:
    def __init__(self, connection: socket.socket) -> None:
        self._connection = connection
        self.buffer = bytearray()  # appended to in place: a long answer is not copied per read

    def more(self) -> bool:
        data = self._connection.recv(CHUNK)
        self.buffer += data
        return bool(data)

    def rest(self, cap: int | None = None) -> bytes:
        """Up to the connection's end, or `cap` bytes (what follows is not read)."""
        while (cap is None or len(self.buffer) < cap) and self.more():
            pass
        return bytes(self.buffer[:cap])


def _response(reader: _Reader, sink: Sink | None = None) -> tuple[int, bytes]:
    while True:
        while b"\r\n\r\n" not in reader.buffer:
            if len(reader.buffer) > HEAD_LIMIT:
                raise Broken(f"an answer's head over {HEAD_LIMIT} bytes")
            if not reader.more():
                raise Broken("Server disconnected without sending a response.")
        end = reader.buffer.index(b"\r\n\r\n")
        head = bytes(reader.buffer[:end])
        del reader.buffer[: end + 4]
        status_line, *lines = head.split(b"\r\n")
        version, status = status_line.split(None, 2)[:2]
        if not version.startswith(b"HTTP/") or not status.isdigit():
            raise Broken(f"not an HTTP response: {status_line[:80]!r}")
        if not 100 <= int(status) < 200:  # an interim answer (100 Continue): the real one follows
            break
    headers: dict[bytes, bytes] = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    down = sink if sink is not None and 200 <= int(status) < 300 else None  # a download's body
    cap = ERROR_BODY_LIMIT if int(status) >= 400 else None  # an error's: the rest is not read
    length = headers.get(b"content-length")
    if headers.get(b"transfer-encoding", b"").lower().endswith(b"chunked"):
        if down is None:
            return int(status), _joined(_chunks(reader), cap)
        for piece in _chunks(reader):  # of no stated length: each piece to the sink as it comes
            down(piece)
        return int(status), b""
    if down is not None:  # no length: the body is what comes until the server closes
        _drain(reader, None if length is None else int(length), down)
        return int(status), b""
    if length is None:
        return int(status), reader.rest(cap)
    want = int(length) if cap is None else min(int(length), cap)
    while len(reader.buffer) < want:
        if not reader.more():
            raise Broken("Server disconnected before the end of the response.")
    return int(status), bytes(reader.buffer[:want])


def _joined(pieces: Iterator[bytes], cap: int | None) -> bytes:
    """A body from its pieces, no further than `cap` bytes (None: all of it)."""
    body = bytearray()
    for piece in pieces:
        body += piece
        if cap is not None and len(body) >= cap:
            break
    return bytes(body[:cap])


def _drain(reader: _Reader, length: int | None, sink: Sink) -> None:
    """`length` bytes of body (None: up to the connection's end) into `sink`, holding at most a
    read's worth at a time."""
    left = length
    while True:
        piece = bytes(reader.buffer if left is None else reader.buffer[:left])
        if piece:
            sink(piece)
        reader.buffer.clear()
        if left is not None:
            left -= len(piece)
            if not left:
                return
        if not reader.more():
            if left is None:
                return
            raise Broken("Server disconnected before the end of the response.")


_HEX = frozenset(b"0123456789abcdefABCDEF")
_SIZE_LINE = 1024  # a chunk's size line, extensions included: more is no HTTP server's


def _chunks(reader: _Reader) -> Iterator[bytes]:
    """A chunked body's data a read's worth at a time, as it arrives (never held whole)."""
    while True:
        while b"\r\n" not in reader.buffer:
            if len(reader.buffer) > _SIZE_LINE:
                raise Broken("a chunk's size line too long")
            if not reader.more():
                raise Broken("Server disconnected before the end of the response.")
        end = reader.buffer.index(b"\r\n")
        digits = bytes(reader.buffer[:end]).split(b";")[0].strip()
        if not digits or not _HEX.issuperset(digits):
            raise Broken(f"not a chunk's size: {digits[:20]!r}")
        left = int(digits, 16)
        del reader.buffer[: end + 2]
        if not left:
            return  # trailers, if any, are not read: the connection closes
        while left:
            if not reader.buffer and not reader.more():
                raise Broken("Server disconnected before the end of the response.")
            piece = bytes(reader.buffer[:left])
            del reader.buffer[: len(piece)]
            left -= len(piece)
            yield piece
        while len(reader.buffer) < 2:
            if not reader.more():
                raise Broken("Server disconnected before the end of the response.")
        if reader.buffer[:2] != b"\r\n":
            raise Broken("a chunk not ended by CRLF")
        del reader.buffer[:2]

"""The quick commands' HTTP/1.1 exchange reads every way a server may frame its answer, and says
so when what came back is not a whole answer.

The attack: a body cut at a chunk boundary, an interim `100 Continue` taken for the answer, or a
connection closed mid-body read as a short JSON document would print a wrong table, or a
traceback, where the SDK says `connection_failed`.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from sanbox.cli.plainhttp import Broken, Unreached, exchange

pytestmark = pytest.mark.unit

HEAD = b"GET /v1/computers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


@contextmanager
def answering(raw: bytes) -> Iterator[int]:
    """A server on a free port that reads one request and answers `raw`, then closes; its port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            while b"\r\n\r\n" not in connection.recv(65536):
                pass
            connection.sendall(raw)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        thread.join(5)
        listener.close()


@pytest.mark.parametrize(
    ("raw", "status", "body"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 200, b"{}"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}trailing", 200, b"{}"),
        (b'HTTP/1.0 404 Not Found\r\n\r\n{"error": 1}', 404, b'{"error": 1}'),
        (b"HTTP/1.1 204 No Content\r\n\r\n", 204, b""),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'3;ext=1\r\n{"a\r\n7\r\n": [1]}\r\n0\r\n\r\n',
            200,
            b'{"a": [1]}',
        ),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\n1",
            201,
            b"1",
        ),
    ],
)
def test_each_framing_reads_to_the_whole_body(raw: bytes, status: int, body: bytes) -> None:
    with answering(raw) as port:
        assert exchange("127.0.0.1", port, HEAD, b"", 5) == (status, body)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    ],
)
def test_a_partial_answer_is_broken(raw: bytes) -> None:
    with answering(raw) as port, pytest.raises(Broken):
        exchange("127.0.0.1", port, HEAD, b"", 5)


def test_no_listener_is_unreached() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening
        with pytest.raises(Unreached):
            exchange("127.0.0.1", port, HEAD, b"", 5)

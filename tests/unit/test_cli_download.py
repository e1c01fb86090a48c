"""`sanbox cp NAME:PATH LOCAL` writes the whole file or leaves the local one as it was, however
the server frames the download, the quick way (plain HTTP) and the typer app's (the SDK's
`files.download`).

The attack: an answer without a length (read up to the server's close) went to no sink, so `cp`
wrote an empty file and said "copied 0 bytes"; a chunked one was held whole in memory; and the
target was truncated at the first byte, so a copy cut midway destroyed the file it was replacing.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sanbox.cli.plainhttp import Broken, exchange
from sanbox.sdk.local_file import WholeFile

pytestmark = pytest.mark.unit

ENTRY = "import sys; sys.argv[0] = 'sanbox'; from sanbox.cli.main import main; main()"
HEAD = b"GET /f HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
BODY = b"the guest's file\n" * 1000
COMPUTER = {"id": "cmp_1", "name": "box", "state": "running", "template": "base"}


class _Guest(BaseHTTPRequestHandler):
    """The API as far as `cp box:/f LOCAL` reads it; the download framed as `framing` says:
    `unframed` (no length, up to the close), `cut` (a length, then half and a close)."""

    framing = ""

    def do_GET(self) -> None:
        if self.path == "/v1/computers/box":
            self._json(COMPUTER)
        elif self.path.startswith("/v1/computers/cmp_1/files/stat"):
            self._json({"name": "f", "path": "/f", "type": "file", "size": len(BODY)})
        elif self.path.startswith("/v1/computers/cmp_1/files?"):
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            cut = self.framing == "cut"
            if cut:
                self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY[: len(BODY) // 2] if cut else BODY)
        else:
            self.send_error(404)

    def _json(self, value: object) -> None:
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def guest(framing: str) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Guest", (_Guest,), {"framing": framing}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def cp(url: str, tmp_path: Path, target: Path, eager: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SANBOX_URL": url,
        "SANBOX_API_KEY": "sbk_test",
        "SANBOX_CONFIG": str(tmp_path / "absent.toml"),
        "SANBOX_CLI_EAGER": eager,  # "1": the typer app, and so the SDK's download
    }
    return subprocess.run(
        [sys.executable, "-c", ENTRY, "cp", "box:/f", str(target)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("eager", ["", "1"], ids=["quick", "typer"])
def test_a_download_without_a_length_is_written_whole(tmp_path: Path, eager: str) -> None:
    target = tmp_path / "f"
    with guest("unframed") as url:
        proc = cp(url, tmp_path, target, eager)
    assert proc.returncode == 0, proc.stderr
    assert target.read_bytes() == BODY
    assert proc.stderr.strip() == f"copied {len(BODY)} bytes"


@pytest.mark.parametrize("eager", ["", "1"], ids=["quick", "typer"])
def test_a_cut_download_leaves_the_file_that_was_there(tmp_path: Path, eager: str) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"yesterday's work\n")
    with guest("cut") as url:
        proc = cp(url, tmp_path, target, eager)
    assert proc.returncode == 1
    assert "error (connection_failed)" in proc.stderr and "Traceback" not in proc.stderr
    assert target.read_bytes() == b"yesterday's work\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # no temporary file left


def test_a_chunked_download_reaches_its_sink_as_it_arrives() -> None:
    """The server sends its second chunk only once the sink has the first: read whole first,
    the download would wait for a close that never comes (here: the exchange's timeout)."""
    listener = socket.create_server(("127.0.0.1", 0))
    first_seen = threading.Event()

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            while b"\r\n\r\n" not in connection.recv(65536):
                pass
            head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            connection.sendall(head + b"5\r\nfirst\r\n")
            if first_seen.wait(10):
                connection.sendall(b"6;x=y\r\nsecond\r\n0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    pieces: list[bytes] = []

    def sink(piece: bytes) -> None:
        pieces.append(piece)
        first_seen.set()

    try:
        assert exchange("127.0.0.1", listener.getsockname()[1], HEAD, b"", 5, sink) == (200, b"")
    finally:
        first_seen.set()
        thread.join(5)
        listener.close()
    assert b"".join(pieces) == b"firstsecond"


@pytest.mark.parametrize("size", [b"-1", b"zz", b"", b"1" * 2000])
def test_a_chunk_size_that_is_none_is_broken(size: bytes) -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            while b"\r\n\r\n" not in connection.recv(65536):
                pass
            head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            connection.sendall(head + size + b"\r\nab\r\n0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with pytest.raises(Broken):
            exchange("127.0.0.1", listener.getsockname()[1], HEAD, b"", 5, lambda _: None)
    finally:
        thread.join(5)
        listener.close()


def test_a_whole_file_keeps_the_old_ones_mode_and_writes_through_a_link(tmp_path: Path) -> None:
    real = tmp_path / "run.sh"
    real.write_bytes(b"old")
    real.chmod(0o750)
    link = tmp_path / "link"
    link.symlink_to(real)
    with WholeFile(link) as out:
        out.write(b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"
    assert real.stat().st_mode & 0o777 == 0o750
    with pytest.raises(RuntimeError), WholeFile(real) as out:
        out.write(b"half")
        raise RuntimeError("cut")
    assert real.read_bytes() == b"new"
    with WholeFile(tmp_path / "empty"):
        pass
    assert (tmp_path / "empty").read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "link", "run.sh"]


def test_a_whole_file_in_no_folder_is_named_by_its_target(tmp_path: Path) -> None:
    target = tmp_path / "nowhere" / "f"
    with pytest.raises(FileNotFoundError) as raised, WholeFile(target) as out:
        out.write(b"x")
    assert raised.value.filename == str(target)


def test_a_target_that_is_no_regular_file_is_written_into(tmp_path: Path) -> None:
    """`sanbox cp box:/f /dev/stdout` (a pipe, here), or a FIFO: written into, never replaced
    by a file (as root, a temporary file renamed over /dev/null would replace the device)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    with WholeFile(fifo) as out:
        out.write(b"through")
    reader.join(10)
    assert got == [b"through"] and stat.S_ISFIFO(fifo.lstat().st_mode)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sanbox.sdk.local_file import WholeFile\n"
            "with WholeFile('/dev/stdout') as out: out.write(b'to the pipe')",
        ],
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout == b"to the pipe", proc.stderr
    with WholeFile("/dev/null") as out:
        out.write(b"gone")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)

"""A file read while it grows (a log being written) through the real server (uvicorn: a body
longer than its Content-Length breaks the answer): the API and the console send it as it was
when it was looked at, every time; a directory is refused, not sent as a broken file; a file
whose stat says 0 bytes (/proc's) is read to its end."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from sanbox import Sanbox
from sanbox.control import guest
from sanbox.sdk.errors import SanboxError

from .conftest import LiveServer

pytestmark = pytest.mark.component

LINE = b"0" * 1023 + b"\n"


def test_a_growing_file_reads_whole_through_the_api_and_the_console(
    live_server: LiveServer, tmp_path: Path
) -> None:
    log = tmp_path / "growing.log"  # the stand-in's guests share this host's files
    log.write_bytes(LINE)
    stop = threading.Event()

    def write() -> None:
        with log.open("ab") as f:
            while f.tell() < 32 * 2**20 and not stop.wait(0.001):  # about 8 MiB/s
                f.write(LINE * 8)
                f.flush()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        with Sanbox(live_server.url, live_server.key, timeout=60) as client:
            c = client.computers.create(name="logs", idle_timeout=0)
            for _ in range(20):  # each read races the appends
                data = c.files.read(str(log))
                assert data and set(data) <= set(LINE) and len(data) % len(LINE) == 0
            with httpx.Client(base_url=live_server.url, timeout=60) as browser:
                origin = {"origin": live_server.url}
                r = browser.post("/console/login", data={"key": live_server.key}, headers=origin)
                assert r.status_code == 303, r.text
                for _ in range(5):
                    got = browser.get(f"/console/computers/logs/files/download?path={log}")
                    assert got.status_code == 200 and set(got.content) <= set(LINE)
                folder = browser.get(f"/console/computers/logs/files/download?path={tmp_path}")
                assert folder.status_code == 422, folder.text
                assert folder.json()["error"]["code"] == "is_a_directory"
            c.delete()
    finally:
        stop.set()
        writer.join()


def test_a_file_whose_stat_says_empty_is_read_to_its_end(
    live_server: LiveServer, tmp_path: Path
) -> None:
    """/proc's files stat as 0 bytes and hold more: sent without a length, to their end, through
    the SDK, the console and `sanbox cp` (its quick path)."""
    with Sanbox(live_server.url, live_server.key, timeout=60) as client:
        c = client.computers.create(name="procs", idle_timeout=0)
        assert c.files.stat("/proc/self/status").size == 0
        assert b"Name:" in c.files.read("/proc/self/status")
        with httpx.Client(base_url=live_server.url, timeout=60) as browser:
            origin = {"origin": live_server.url}
            browser.post("/console/login", data={"key": live_server.key}, headers=origin)
            got = browser.get("/console/computers/procs/files/download?path=/proc/self/status")
            assert got.status_code == 200 and b"Name:" in got.content
        env = {**os.environ, "SANBOX_URL": live_server.url, "SANBOX_API_KEY": live_server.key}
        copied = subprocess.run(
            [sys.executable, "-c", "from sanbox.cli.main import main; main()", "cp"]
            + ["procs:/proc/self/status", str(tmp_path / "status")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert copied.returncode == 0, copied.stderr
        assert b"Name:" in (tmp_path / "status").read_bytes()
        c.delete()


def test_a_file_that_never_ends_is_refused_or_cut(
    live_server: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device (/dev/zero, or a link to it) is no file to download: refused `not_a_file` before
    a byte is sent (it streamed without end). A file whose stat says 0 is sent to its end but
    no further than a bound: past it the answer is cut, never sent whole."""
    (tmp_path / "zero").symlink_to("/dev/zero")
    with Sanbox(live_server.url, live_server.key, timeout=60) as client:
        c = client.computers.create(name="devices", idle_timeout=0)
        for path in ("/dev/zero", str(tmp_path / "zero")):
            with pytest.raises(SanboxError) as refused:
                c.files.read(path)
            assert refused.value.code == "not_a_file", refused.value
        monkeypatch.setattr(guest, "UNSIZED_MOST", 64)  # /proc/self/status holds more
        with pytest.raises(SanboxError):
            c.files.read("/proc/self/status")
        c.delete()

"""A download outlives no revocation or expiry of the key that asked for it (nor, in the
console, the end of its session): it is cut within a re-check, never ended as if whole (a file
of unknown length is sent chunked: a body that ended short would read as the whole file). The
guest's side here is a slow file: `read_file` yields a piece every 50 ms for 30 s."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from sanbox.api import standing
from sanbox.control.guest_verbs import GuestVerbs

from .conftest import Server, local_app, served
from .test_api_computers import create
from .test_published_access import in_background

pytestmark = pytest.mark.component


@pytest.fixture
def slow_files(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Every file read is slow; the event is set once one started."""
    started = threading.Event()

    def read_file(*_args: object, **_kw: object) -> AsyncIterator[bytes]:
        async def pieces() -> AsyncIterator[bytes]:
            started.set()
            for _ in range(600):
                yield b"x" * 1024
                await asyncio.sleep(0.05)

        return pieces()

    monkeypatch.setattr(GuestVerbs, "read_file", read_file)
    monkeypatch.setattr(standing, "RECHECK", 0.1)
    return started


def cut_when_revoked(
    server: Server, key_id: str, started: threading.Event, download: Callable[[], object]
) -> None:
    """`download` (of a slow file) is going; the key is revoked; it is cut, not ended whole."""
    ended, outcome = in_background(download)
    assert started.wait(10)
    assert not ended.wait(0.5), "the download should still be going"
    revoked = server.client.delete(f"/v1/keys/{key_id}", headers=server.headers())
    assert revoked.status_code == 200
    assert ended.wait(10), "the download outlived its key"
    assert isinstance(outcome[0], Exception), "a cut download must not read as whole"


def a_file(server: Server, short_tmp: Path, name: str) -> tuple[str, str, str]:
    """A computer `name` with a file, and a key of its own: (path, key, key id)."""
    create(server, name=name)
    made = server.client.post("/v1/keys", json={"name": name}, headers=server.headers())
    path = f"{short_tmp}/big.bin"
    put = server.client.put(
        f"/v1/computers/{name}/files?path={path}", content=b"y" * 10, headers=server.headers()
    )
    assert put.status_code == 200, put.text
    return path, made.json()["key"], made.json()["id"]


def test_a_download_is_cut_when_its_key_is_revoked(
    server: Server, short_tmp: Path, slow_files: threading.Event
) -> None:
    path, key, key_id = a_file(server, short_tmp, "dl")
    url = f"/v1/computers/dl/files?path={path}"
    cut_when_revoked(
        server, key_id, slow_files, lambda: server.client.get(url, headers=server.headers(key))
    )


def test_a_console_download_is_cut_when_its_session_ends(
    server: Server, short_tmp: Path, slow_files: threading.Event
) -> None:
    path, key, key_id = a_file(server, short_tmp, "cdl")
    login = server.client.post(
        "/console/login",
        data={"key": key},
        headers={"origin": "http://testserver"},
        follow_redirects=False,
    )
    assert login.status_code == 303, login.text
    url = f"/console/computers/cdl/files/download?path={path}"
    cut_when_revoked(server, key_id, slow_files, lambda: server.client.get(url))  # its session


class _Collect(logging.Handler):
    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_cut_download_is_no_error_in_the_servers_log(
    short_tmp: Path, slow_files: threading.Event
) -> None:
    """Served by uvicorn, as `sanbox server` serves: the cut is a line of information, not an
    "Exception in ASGI application" traceback nor an "internal error"."""
    app, _ = local_app(short_tmp)
    collect = _Collect(logging.INFO)
    logged = collect.records
    watched = [logging.getLogger(n) for n in ("uvicorn.error", "sanbox.api.errors")]
    levels = [logger.level for logger in watched]
    for logger in watched:
        logger.addHandler(collect)
        logger.setLevel(logging.INFO)
    try:
        with served(app) as url, httpx.Client(base_url=url) as http:
            admin = {"Authorization": f"Bearer {app.state.first_key}"}
            assert http.post("/v1/computers", json={"name": "dl"}, headers=admin).is_success
            made = http.post("/v1/keys", json={"name": "dl"}, headers=admin).json()
            download = f"/v1/computers/dl/files?path={short_tmp}/big.bin"
            put = http.put(download, content=b"y" * 600 * 1024, headers=admin)  # as slow_files
            assert put.is_success, put.text
            mine = {"Authorization": f"Bearer {made['key']}"}
            ended, outcome = in_background(lambda: http.get(download, headers=mine).read())
            assert slow_files.wait(10) and not ended.wait(0.5)
            assert http.delete(f"/v1/keys/{made['id']}", headers=admin).is_success
            assert ended.wait(10), "the download outlived its key"
            assert isinstance(outcome[0], httpx.HTTPError), "a cut download must not read whole"
            assert http.delete("/v1/computers/dl", headers=admin).is_success
    finally:
        for logger, level in zip(watched, levels, strict=True):
            logger.removeHandler(collect)
            logger.setLevel(level)
    errors = [r.getMessage() for r in logged if r.levelno >= logging.ERROR]
    assert errors == []
    assert any("cut: this API key was revoked" in r.getMessage() for r in logged)

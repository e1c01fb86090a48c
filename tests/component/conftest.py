"""The component tier runs the API, the control plane and the real store in-process, with the real
guest agent running as a local process in place of a VM: the local driver (`sanbox.host.drivers.
local`, a test double for the hypervisor only: disks, run dirs, sockets, the agent protocol and
the store are all real)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text

from sanbox.api import ServerSettings, create_app
from sanbox.host.data.layout import DataDir
from sanbox.host.door import Machine
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.image import recipe_for
from sanbox.host.runtime import HostRuntime
from sanbox.store import Database

SRC = Path(__file__).parents[2] / "src"


def fake_image(dd: DataDir, size: int = 1024**3) -> None:
    build_id = recipe_for("base").build_id()
    path = dd.images / "base" / build_id
    path.mkdir(parents=True)
    for name in ("vmlinuz", "initrd.img"):
        (path / name).write_bytes(b"")
    with open(path / "rootfs.raw", "wb") as f:
        f.truncate(size)
    manifest = {
        "template": "base",
        "build_id": build_id,
        "kernel_release": "test",
        "disk_size_gib": 1,
    }
    (path / "manifest.json").write_text(json.dumps(manifest))


def host_identity() -> dict[str, object]:
    """What names this host, which no local 'VM' may change."""
    named: dict[str, object] = {"hostname": os.uname().nodename}
    for path in ("/etc/hostname", "/etc/machine-id"):
        with contextlib.suppress(OSError):
            named[path] = Path(path).read_bytes()
    with contextlib.suppress(OSError):
        named["/etc/ssh"] = sorted(os.listdir("/etc/ssh"))
    return named


@pytest.fixture(autouse=True)
def host_untouched() -> Iterator[None]:
    """Every component test: the local agents of its computers left this host's name alone."""
    before = host_identity()
    yield
    assert host_identity() == before, "a local agent changed this host's identity"


@dataclass
class Server:
    client: TestClient
    key: str
    data_dir: DataDir
    settings: ServerSettings

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key}"}


def local_app(short_tmp: Path, **more: Any) -> tuple[FastAPI, DataDir]:
    """The real app on the local driver (no networking), its data dir under `short_tmp` with a
    stand-in image, watching every 0.2 s, with `more` of its settings; writes no client config."""
    dd = DataDir(short_tmp / "data")
    dd.ensure()
    fake_image(dd)
    settings = ServerSettings(data_dir=dd.root, client_config=None, watch_interval=0.2, **more)
    return create_app(settings, HostRuntime(dd, LocalDriver(), networking=False)), dd


def start_server(
    root: Path, database_url: str | None = None
) -> tuple[TestClient, ServerSettings, DataDir]:
    dd = DataDir(root / "data")
    settings = ServerSettings(
        data_dir=dd.root,
        client_config=root / "config.toml",
        watch_interval=0.2,
        database_url=database_url,
    )
    runtime = HostRuntime(dd, LocalDriver(), networking=False)
    return TestClient(create_app(settings, runtime)), settings, dd


@pytest.fixture
def server(short_tmp: Path) -> Iterator[Server]:
    yield from serve(short_tmp)


def serve(short_tmp: Path, database_url: str | None = None) -> Iterator[Server]:
    dd = DataDir(short_tmp / "data")
    dd.ensure()
    fake_image(dd)
    client, settings, dd = start_server(short_tmp, database_url)
    with client:
        key = client.app.state.first_key  # type: ignore[attr-defined]
        yield Server(client, key, dd, settings)
        for row in client.get("/v1/computers", headers={"Authorization": f"Bearer {key}"}).json()[
            "computers"
        ]:
            client.delete(f"/v1/computers/{row['id']}", headers={"Authorization": f"Bearer {key}"})


@dataclass
class LiveServer:
    url: str
    key: str
    data_dir: DataDir


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """An ASGI app served by a real uvicorn on a free port, in a thread; yields its URL."""
    import socket

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, port=port, log_level="error", ws="websockets-sansio")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def live_server(short_tmp: Path) -> Iterator[LiveServer]:
    """The real app served by uvicorn on a free port in a thread (for the sync SDK and the CLI)."""
    dd = DataDir(short_tmp / "data")
    dd.ensure()
    fake_image(dd)
    settings = ServerSettings(data_dir=dd.root, client_config=None, watch_interval=0.2)
    app = create_app(settings, HostRuntime(dd, LocalDriver(), networking=False))
    with served(app) as url:
        yield LiveServer(url, app.state.first_key, dd)


def clean_pg() -> str:
    """The URL of the test PostgreSQL with its schema emptied (the test is skipped without one)."""
    url = os.environ.get("SANBOX_TEST_PG_URL")
    if not url:
        pytest.skip("PostgreSQL tests need SANBOX_TEST_PG_URL (scripts/test sets it)")
    db = Database(url)
    with db.engine.begin() as conn:
        conn.execute(text("drop schema public cascade"))
        conn.execute(text("create schema public"))
    db.close()
    return url


@pytest.fixture
def db(tmp_path: Path) -> Database:
    """A migrated SQLite store of the test's own (a module may make its own instead)."""
    database = Database(f"sqlite:///{tmp_path / 'sanbox.db'}")
    database.migrate()
    return database


def beside(
    server: Server,
    answers: dict[str, Any],
    name: str,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> threading.Thread:
    """A request sent in a thread of its own, beside one the test holds; its answer is kept as
    `answers[name]` (join the thread first)."""

    def run() -> None:
        answers[name] = server.client.request(
            method, path, json=body, headers=headers or server.headers()
        )

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def still_waiting(thread: threading.Thread, release: threading.Event, what: str) -> None:
    """`thread`'s request has not been answered 2 s on (time enough for one that does not wait:
    else `what` fails the test); `release` is set then, whatever happened."""
    try:
        thread.join(2.0)
        assert thread.is_alive(), what
    finally:
        release.set()


@dataclass
class E2bStand:
    """E2B's API and envd: a server whose default user is root (the stand-in guest is this host:
    `e2b_create_user=False`, so no `useradd` runs here)."""

    client: TestClient
    key: str
    data_dir: DataDir
    scratch: Path  # a folder for the tests' files: the guest is this host

    @property
    def api(self) -> dict[str, str]:
        return {"X-API-KEY": self.key}

    @property
    def v1(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def create(self, **body: Any) -> tuple[str, dict[str, str]]:
        """A new sandbox of `base` made through `/e2b`: its id and the headers of an envd call."""
        made = self.client.post(
            "/e2b/sandboxes", headers=self.api, json={"templateID": "base", **body}
        )
        assert made.status_code == 201, made.text
        sandbox, token = made.json()["sandboxID"], made.json()["envdAccessToken"]
        return sandbox, {"E2b-Sandbox-Id": sandbox, "X-Access-Token": token}


@pytest.fixture
def e2b(short_tmp: Path) -> Iterator[E2bStand]:
    with e2b_stand(short_tmp) as stand:
        yield stand


@contextlib.contextmanager
def e2b_stand(short_tmp: Path, **more: Any) -> Iterator[E2bStand]:
    """The `e2b` fixture's server, with `more` of its settings (its bounds)."""
    app, dd = local_app(short_tmp, e2b_create_user=False, **more)
    client = TestClient(app)
    scratch = short_tmp / "guest"
    scratch.mkdir()
    with client:
        key = client.app.state.first_key  # type: ignore[attr-defined]
        stand = E2bStand(client, key, dd, scratch)
        yield stand
        for row in client.get("/v1/computers", headers=stand.v1).json()["computers"]:
            client.delete(f"/v1/computers/{row['id']}", headers=stand.v1)


@pytest.fixture
def pausable(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The stand-in keeps no memory: its pause ends the VM as a pause does, and a resume boots
    it afresh on its disk."""

    async def pause(self: HostRuntime, machine: Machine, *_args: Any) -> Any:
        await machine.vm.kill()
        return SimpleNamespace(size=0, seconds=0.0)

    monkeypatch.setattr(HostRuntime, "pause", pause)
    yield

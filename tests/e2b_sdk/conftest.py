"""The e2b tier: E2B's own SDK, unmodified, against a real Sanbox server on loopback (uvicorn in a
thread: the SDK needs real HTTP). One server per session; its computers are the component tier's
stand-in (the real guest agent as a local process), so the default user is root here
(`e2b_create_user=False`: the stand-in's guest is this host). The SDK is pointed at the server
with its single-URL settings (`E2B_API_URL`, `E2B_SANDBOX_URL`), as docs/e2b.md says."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from e2b import Sandbox

from sanbox.api import ServerSettings, create_app
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime

from ..component.conftest import fake_image, served
from ..conftest import kill_agents

E2B_VERSION = "2.63.0"  # the newest release supported; the oldest (2.45.1) runs in a subprocess


@dataclass
class E2bServer:
    url: str
    key: str  # org A's (the default org's host-admin key)
    other_key: str  # a key of org B
    data_dir: DataDir
    scratch: str  # a folder for the tests' files: the stand-in's guest is this host

    @property
    def envs(self) -> dict[str, str]:
        """A sandbox's environment here: a HOME of its own, so `bash -l` reads no profile of
        this host's (root's runs `pyenv rehash`, which may wait on a lock)."""
        return {"HOME": f"{self.scratch}/home"}

    @property
    def hex_key(self) -> str:
        """The key as the SDK releases that check E2B's key shape take it."""
        return "e2b_" + self.key.encode().hex()

    @property
    def env(self) -> dict[str, str]:
        return {
            "E2B_API_KEY": self.key,
            "E2B_API_URL": f"{self.url}/e2b",
            "E2B_SANDBOX_URL": f"{self.url}/e2b-envd",
        }


@pytest.fixture(scope="session")
def e2b_server() -> Iterator[E2bServer]:
    root = Path(tempfile.mkdtemp(prefix="sbe", dir="/tmp"))
    dd = DataDir(root / "data")
    dd.ensure()
    fake_image(dd)
    settings = ServerSettings(
        data_dir=dd.root,
        client_config=None,
        watch_interval=0.2,
        e2b_create_user=False,
        usage_sample_interval=1.0,  # get_metrics has points within seconds
    )
    app = create_app(settings, HostRuntime(dd, LocalDriver(), networking=False))
    try:
        with served(app) as url:
            key = app.state.first_key
            admin = {"Authorization": f"Bearer {key}"}
            httpx.post(f"{url}/v1/orgs", json={"name": "orgb"}, headers=admin).raise_for_status()
            made = httpx.post(f"{url}/v1/keys", json={"org": "orgb"}, headers=admin)
            made.raise_for_status()
            scratch = root / "guest"
            (scratch / "home").mkdir(parents=True)
            server = E2bServer(url, key, made.json()["key"], dd, str(scratch))
            saved = {k: os.environ.get(k) for k in server.env}
            os.environ.update(server.env)
            try:
                yield server
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
    finally:
        kill_agents(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def sandbox(e2b_server: E2bServer) -> Iterator[Sandbox]:
    """A sandbox of `base` for a module's tests (a module may make its own instead)."""
    sbx = Sandbox.create("base", envs=e2b_server.envs)
    yield sbx
    sbx.kill()

"""A real `sanbox server` process for the vm tier, on a free port, with its own data dir that
shares the built images (and the acceleration probe) of the test data dir."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from sanbox.host.data.layout import DataDir
from tests.conftest import free_port

BIN = Path(sys.executable).parent / "sanbox"
__all__ = ["BIN", "ServerProcess", "free_port"]


class ServerProcess:
    def __init__(self, shared: DataDir, name: str, env: dict[str, str] | None = None) -> None:
        self.env = env or {}
        self.data_dir = DataDir(shared.root / name)
        self.data_dir.root.mkdir(parents=True, exist_ok=True)
        for link in ("images", "host"):
            target = self.data_dir.root / link
            if not target.exists():
                target.symlink_to(shared.root / link)
        self.config = self.data_dir.root / "config.toml"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.data_dir.root / "server.log"

    @property
    def key(self) -> str:
        for line in self.config.read_text().splitlines():
            if line.startswith("api_key"):
                return line.split('"')[1]
        raise AssertionError("no api_key in the client config")

    def start(self) -> None:
        env = {**os.environ, **self.env, "SANBOX_CONFIG": str(self.config)}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(BIN),
                    "server",
                    "--port",
                    str(self.port),
                    "--data-dir",
                    str(self.data_dir.root),
                    "--log-level",
                    "warning",
                ],
                env=env,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError("the server did not start: " + self.log.read_text()[-2000:])

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill9()

    def remove(self) -> None:
        """Stop it and remove its data dir (its images are the shared ones: links), unless a
        computer's folder is left there to look at."""
        self.stop()
        if not any(self.data_dir.computers.glob("*")):
            shutil.rmtree(self.data_dir.root, ignore_errors=True)

"""The browser tier: the web console in Debian's Chromium (`apt-get install chromium`, never a
downloaded browser) driven by Playwright, against one real server for the whole tier (uvicorn
on 127.0.0.1) whose computers are the real guest agent as local processes (the component tier's
stand-in for the hypervisor). Screenshots go to $SANBOX_TEST_DATA_DIR/console-shots/."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from sanbox.api import ServerSettings, create_app
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime
from tests.component.conftest import fake_image
from tests.conftest import free_port, kill_agents

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(os.environ.get("SANBOX_TEST_DATA_DIR", "/var/lib/sanbox-test")) / "console-shots"


def unavailable() -> str | None:
    if not CHROMIUM.exists():
        return "Debian's chromium is not installed (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return None


@dataclass
class Live:
    url: str
    key: str
    port: int
    data: DataDir
    root: Path

    def api(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key or self.key}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)


@pytest.fixture(scope="package")
def live() -> Iterator[Live]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with running_server() as found:
        yield found


@contextlib.contextmanager
def running_server() -> Iterator[Live]:
    """A real server on a free port of 127.0.0.1, its computers local agent processes."""
    root = Path(tempfile.mkdtemp(prefix="sbb", dir="/tmp"))
    dd = DataDir(root / "data")
    dd.ensure()
    fake_image(dd)
    port = free_port()
    settings = ServerSettings(
        data_dir=dd.root,
        client_config=root / "config.toml",
        watch_interval=0.2,
        host="127.0.0.1",
        port=port,
        usage_sample_interval=0.5,  # the charts get points within the tier
    )
    app = create_app(settings, HostRuntime(dd, LocalDriver(), networking=False))
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield Live(f"http://127.0.0.1:{port}", app.state.first_key, port, dd, root)
    finally:
        server.should_exit = True
        thread.join(30)
        kill_agents(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="package")
def browser(live: Live) -> Iterator[Any]:
    with chromium() as found:
        yield found


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium under Playwright (never a downloaded browser)."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        found = p.chromium.launch(executable_path=str(CHROMIUM))
        try:
            yield found
        finally:
            found.close()


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def log_in(browser: Any, live: Live | str, key: str, width: int = 1280) -> Any:
    url = live if isinstance(live, str) else live.url
    context = browser.new_context(base_url=url, viewport={"width": width, "height": 900})
    page = context.new_page()
    page.on("dialog", lambda d: d.accept())
    page.goto("/console")
    page.fill("#key", key)
    page.click("button[type=submit]")
    page.wait_for_url("**/console/computers")
    return page

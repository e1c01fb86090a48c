"""A fleet host for the component tier: joined as an operator joins one (`sanbox host token`,
`sanbox host join`), its host agent served in this process on the local driver, and waited for
until the server sees it up with its builds."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from sanbox.fleet.link.agent import HostAgent
from sanbox.fleet.link.pki import FleetCAs, host_identity
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime

from .conftest import LiveServer, fake_image
from .test_host_link import _hosts, _serving, _until, _wait_until_up, join_host


@contextlib.contextmanager
def served_host(
    live: LiveServer, host_dir: Path, port: int, name: str = "h1", region: str = "eu-1"
) -> Iterator[threading.Event]:
    """Host `name` joined (once) and served until the block ends; yields its stop event."""
    if not (host_dir / "host" / "fleet").exists():
        join_host(live, host_dir, port, name, region)
        fake_image(DataDir(host_dir))
    agent = HostAgent(HostRuntime(DataDir(host_dir), LocalDriver(), networking=False))
    me = host_identity(DataDir(host_dir).host / "fleet")
    with _serving(agent, port, me) as stop:
        control = FleetCAs(live.data_dir.root / "fleet").control_identity()
        _wait_until_up(f"https://127.0.0.1:{port}", control)
        _until(f"{name} up with its builds", lambda: up(live, name), timeout=30)
        yield stop


def up(live: LiveServer, name: str) -> bool:
    return any(h.name == name and h.state == "up" and h.layers for h in _hosts(live))

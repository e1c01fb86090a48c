"""Two API nodes over one PostgreSQL database and one fleet host (a real host agent over mutual
TLS, on the local driver): a computer made through one node is used through the other (exec,
files, a PTY, SSH, a published port and a console session through either node, its verbs), and
a verb on one node waits for an operation another node holds on the same computer (the
database's one incomplete operation per computer), never running beside it."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from sanbox import Sanbox
from sanbox.api.app import create_app
from sanbox.api.settings import ServerSettings
from sanbox.control.computers import Computers
from sanbox.fleet.link.agent import HostAgent
from sanbox.fleet.link.pki import FleetCAs, host_identity
from sanbox.fleet.operations import Operations
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime
from sanbox.sdk import Computer
from sanbox.store import Database
from tests.component.conftest import LiveServer, fake_image, served
from tests.component.test_host_link import _free_port, _sanbox, _serving, _until, _wait_until_up
from tests.component.test_published_access import guest_page
from tests.component.test_ssh import stand_in_sshd
from tests.conftest import kill_agents

from .conftest import fresh_schema

pytestmark = pytest.mark.fleet


@dataclass
class Node(LiveServer):
    plane: Computers  # its control plane: to wait until it reads the host's reports

    def linked(self, host: str) -> bool:
        return self.plane.hosts.links[host].reachable


@pytest.fixture
def pg_fresh() -> Iterator[str]:
    yield from fresh_schema()


def _node(root: Path, url: str, fleet_dir: Path | None) -> ServerSettings:
    dd = DataDir(root)
    dd.ensure()
    fake_image(dd)
    return ServerSettings(
        data_dir=dd.root,
        database_url=url,
        client_config=None,
        watch_interval=0.2,
        host_lease=4.0,
        host_lost_after=8.0,
        fleet_dir=fleet_dir,
    )


@pytest.fixture
def two_nodes(pg_fresh: str, tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    a = _node(tmp_path / "a", pg_fresh, None)
    b = _node(tmp_path / "b", pg_fresh, tmp_path / "a" / "fleet")  # the fleet's CAs, shared
    app_a = create_app(a, HostRuntime(a.layout, LocalDriver(), networking=False))
    app_b = create_app(b, HostRuntime(b.layout, LocalDriver(), networking=False))
    try:
        with served(app_a) as url_a:
            key = app_a.state.first_key
            with served(app_b) as url_b:
                yield (
                    Node(url_a, key, a.layout, app_a.state.computers),
                    Node(url_b, key, b.layout, app_b.state.computers),
                )
    finally:
        kill_agents(tmp_path)  # the stand-in's guests of a failed run outlive their host


def _stream(node: Node, seen: queue.Queue[dict[str, object]], stop: threading.Event) -> None:
    """Node's live event stream, each event put in `seen`, until `stop` (or the stream ends)."""
    headers = {"Authorization": f"Bearer {node.key}"}
    with httpx.stream("GET", f"{node.url}/v1/events", headers=headers, timeout=30) as r:
        for line in r.iter_lines():
            if stop.is_set():
                return
            if line.startswith("data: "):
                seen.put(json.loads(line.removeprefix("data: ")))


def _ssh_echo(computer: Computer, data: bytes) -> bytes:
    """What the guest's sshd (the stand-in: an echo) sent back for `data`."""
    got = bytearray()
    with computer.ssh_stream() as stream:
        stream.send(data)
        stream.send_eof()
        while chunk := stream.recv():
            got += chunk
    return bytes(got)


def _pty_size(computer: Computer) -> bytes:
    out = b""
    with computer.exec_stream(["/bin/sh"], pty=True, rows=24, cols=80) as pty:
        pty.send_stdin(b"stty size; exit 3\n")
        for ev in pty:
            out += getattr(ev, "data", b"")
        assert pty.exit is not None and pty.exit.exit_code == 3, out
    return out


def test_two_api_nodes_serve_one_fleet(
    two_nodes: tuple[Node, Node],
    pg_fresh: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = two_nodes
    host_dir, port = tmp_path / "h1", _free_port()
    token = _sanbox(a, "host", "token", "--region", "eu-1").stdout.strip()
    joined = _sanbox(
        b,
        "host",
        "join",
        "--server",
        b.url,
        "--token",
        token,
        "--name",
        "h1",
        "--region",
        "eu-1",
        "--address",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-dir",
        str(host_dir),
    )  # a token made through one node is taken by the other: one database
    assert joined.returncode == 0, joined.stderr
    fake_image(DataDir(host_dir))
    agent = HostAgent(HostRuntime(DataDir(host_dir), LocalDriver(), networking=False))
    me = host_identity(DataDir(host_dir).host / "fleet")
    control = FleetCAs(tmp_path / "a" / "fleet").control_identity()
    with (
        stand_in_sshd(monkeypatch),  # the stand-in's guests answer SSH with an echo
        guest_page() as (page_port, visits),
        _serving(agent, port, me),
        Sanbox(a.url, a.key, timeout=60) as via_a,
        Sanbox(b.url, b.key, timeout=60) as via_b,
    ):
        _wait_until_up(f"https://127.0.0.1:{port}", control)
        _until("h1 up", lambda: bool([h for h in via_a.fleet.hosts() if h.layers]))
        for node in (a, b):  # each node links to the host and reads its report

            def linked(n: Node = node) -> bool:
                return "h1" in n.plane.hosts.links and n.linked("h1")

            _until("linked", linked)
        made = via_a.computers.create(name="shared", idle_timeout=0)
        assert (host_dir / "computers" / made.id).is_dir()
        there = via_b.computers.get(made.id)
        assert there.exec("echo through b").stdout == "through b\n"
        there.files.write(f"/tmp/{made.id}.txt", b"written through b")
        assert made.files.read(f"/tmp/{made.id}.txt") == b"written through b"
        made.exec(f"rm /tmp/{made.id}.txt")

        # a console session opened through one node is one on the other (and its logout too)
        login = httpx.post(f"{a.url}/console/login", data={"key": a.key}, headers={"origin": a.url})
        assert login.status_code == 303, login.text
        cookie = {"sanbox_console": login.cookies["sanbox_console"]}
        page = httpx.get(f"{b.url}/console/computers", cookies=cookie)
        assert page.status_code == 200 and "shared" in page.text, page.status_code
        with httpx.Client(cookies=cookie) as browser:
            page = browser.get(f"{b.url}/console/computers")
            token = page.text.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
            out = browser.post(
                f"{b.url}/console/logout", headers={"origin": b.url, "x-csrf-token": token}
            )
            assert out.status_code == 204, out.text
        gone = httpx.get(f"{a.url}/console/computers", cookies=cookie)
        assert gone.status_code == 401 and gone.headers["x-login"].startswith("/console/login")

        # a PTY, SSH and a published port, each through either node
        for c in (made, there):
            assert b"24 80" in _pty_size(c)
            data = b"SSH-2.0-OpenSSH_9.2\r\n" + os.urandom(200_000)
            assert _ssh_echo(c, data) == data
        url = made.publish(page_port).url
        page_host = urlsplit(url).netloc
        for node in (a, b):
            r = httpx.get(
                f"{node.url}/from-{node.url[-5:]}",
                headers={"host": page_host, "authorization": f"Bearer {node.key}"},
            )
            assert (r.status_code, r.text) == (200, "guest page\n"), r.text
        assert [path for path, _ in visits.requests] == [f"/from-{n.url[-5:]}" for n in (a, b)]

        # streams through both nodes at once: the host agent holds the guest's one connection
        # and carries each node's streams over it (a node's dial never ends the other's streams)
        outcome: dict[str, object] = {}
        slow = threading.Thread(
            target=lambda: outcome.update(a=made.exec("sleep 1.5 && echo still through a").stdout)
        )
        slow.start()
        _until("a's exec running", lambda: there.exec("pgrep -f 'sleep 1.5'").exit_code == 0)
        for i in range(3):
            assert there.exec(f"echo {i} through b").stdout == f"{i} through b\n"
        there.files.write("/tmp/both.txt", b"while a runs")
        slow.join(30)
        assert outcome.get("a") == "still through a\n", outcome

        # an event written through one node reaches a live event stream on the other
        seen: queue.Queue[dict[str, object]] = queue.Queue()
        stop = threading.Event()
        streaming = threading.Thread(target=_stream, args=(b, seen, stop), daemon=True)
        streaming.start()
        try:
            deadline, got = time.monotonic() + 20, None
            for i in itertools.count(1):  # until the stream is open and an update comes through
                via_a.computers.get(made.id).update(idle_timeout=1000 + i)
                with contextlib.suppress(queue.Empty):
                    while got is None:
                        item = seen.get(timeout=1.5)
                        if item["type"] == "computer.updated" and item["computer_id"] == made.id:
                            got = item
                if got is not None or time.monotonic() > deadline:
                    break
            assert got is not None, "node b's stream never showed node a's event"
        finally:
            stop.set()

        # another node holds an operation on it: a verb here waits until it ends
        db = Database(pg_fresh)
        try:
            ops = Operations(db)
            held = ops.begin(made.id, "pause", node="another-node:0000")
            threading.Timer(1.0, ops.finish, (held.op_id,)).start()
            started = time.monotonic()
            there.stop()
            assert time.monotonic() - started >= 0.9, "the stop ran beside the other operation"
            assert made.refresh().state == "stopped"
            assert ops.incomplete(made.id) is None
        finally:
            db.close()
        via_a.computers.get(made.id).start()
        assert there.exec("true").exit_code == 0
        there.delete()
        assert not (host_dir / "computers" / made.id).exists()

"""E2B's sync SDK, unmodified, against Sanbox: commands, files, PTY, timeouts, list, kill, get_host,
org isolation, and the exceptions E2B's SDK raises for a missing sandbox, a bad key and a
command that fails."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from e2b import (
    CommandExitException,
    PtySize,
    Sandbox,
    SandboxMetrics,
    SandboxQuery,
    WatchHandle,
)
from e2b.exceptions import (
    AuthenticationException,
    FileNotFoundException,
    SandboxNotFoundException,
    SandboxNotRunningException,
)

from .conftest import E2bServer

pytestmark = pytest.mark.e2b
MIB = 2**20


@pytest.fixture(scope="module")
def sandbox(e2b_server: E2bServer) -> Iterator[Sandbox]:
    sbx = Sandbox.create(
        "base", metadata={"suite": "sync"}, envs={**e2b_server.envs, "FROM_CREATE": "yes"}
    )
    yield sbx
    sbx.kill()


def wait_until(what: object, timeout: float = 10.0) -> float:
    """Poll `what()` until it is true; the seconds it took."""
    t0 = time.monotonic()
    while not what():  # type: ignore[operator]
        assert time.monotonic() - t0 < timeout, f"{what} did not happen in {timeout}s"
        time.sleep(0.05)
    return time.monotonic() - t0


def test_run_streams_exit_codes_env_and_cwd(sandbox: Sandbox) -> None:
    seen: list[str] = []
    out = sandbox.commands.run(
        "echo out; echo err >&2; echo $FROM_CREATE $ONE; pwd",
        envs={"ONE": "1"},
        cwd="/tmp",
        on_stdout=seen.append,
    )
    assert (out.exit_code, out.stdout, out.stderr) == (0, "out\nyes 1\n/tmp\n", "err\n")
    assert "".join(seen) == out.stdout
    with pytest.raises(CommandExitException) as failed:
        sandbox.commands.run("echo nope >&2; exit 3")
    assert (failed.value.exit_code, failed.value.stderr) == (3, "nope\n")


@pytest.mark.parametrize(
    ("number", "name"),
    [(10, "user defined signal 1"), (30, "power failure"), (31, "bad system call")],
)
def test_a_command_a_signal_ends_says_go_s_name_of_it(
    sandbox: Sandbox, number: int, name: str
) -> None:
    with pytest.raises(CommandExitException) as ended:
        sandbox.commands.run(f"ulimit -c 0; kill -{number} $$")
    assert (ended.value.exit_code, ended.value.error) == (-1, f"signal: {name}")  # as envd


def test_background_process_listed_then_killed(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("sleep 300", background=True)
    assert handle.pid in [p.pid for p in sandbox.commands.list()]
    assert sandbox.commands.kill(handle.pid)
    with pytest.raises(CommandExitException):
        handle.wait()
    wait_until(lambda: handle.pid not in [p.pid for p in sandbox.commands.list()])
    assert not sandbox.commands.kill(handle.pid)  # gone: the SDK says False


def test_stdin(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("cat; echo done", background=True, stdin=True)
    sandbox.commands.send_stdin(handle.pid, "hello\n")
    sandbox.commands.close_stdin(handle.pid)
    assert handle.wait().stdout == "hello\ndone\n"


def test_files(sandbox: Sandbox, e2b_server: E2bServer) -> None:
    files = sandbox.files
    base = f"{e2b_server.scratch}/sync-files"
    assert files.make_dir(base)
    assert not files.make_dir(base)  # there already
    info = files.write(f"{base}/a.txt", "text ✓")
    assert (info.name, info.path) == ("a.txt", f"{base}/a.txt")
    assert files.read(f"{base}/a.txt") == "text ✓"
    files.write(f"{base}/b.bin", b"\x00\x01\xff")
    assert bytes(files.read(f"{base}/b.bin", format="bytes")) == b"\x00\x01\xff"
    assert sorted(e.name for e in files.list(base)) == ["a.txt", "b.bin"]
    assert files.exists(f"{base}/a.txt") and not files.exists(f"{base}/none")
    stat = files.get_info(f"{base}/a.txt")
    assert stat.type is not None  # e2b's EntryInfo types it Optional
    assert (stat.size, stat.type.value) == (len("text ✓".encode()), "file")
    moved = files.rename(f"{base}/a.txt", f"{base}/c.txt")
    assert moved.path == f"{base}/c.txt" and not files.exists(f"{base}/a.txt")
    files.remove(f"{base}/c.txt")
    assert not files.exists(f"{base}/c.txt")
    with pytest.raises(FileNotFoundException):
        files.read(f"{base}/c.txt")


def test_a_50_mib_file_both_ways(sandbox: Sandbox, e2b_server: E2bServer) -> None:
    data, big = os.urandom(50 * MIB), f"{e2b_server.scratch}/big"
    sandbox.files.write(f"{big}.bin", io.BytesIO(data))  # streamed (octet-stream)
    assert bytes(sandbox.files.read(f"{big}.bin", format="bytes")) == data
    sandbox.files.write(f"{big}2.bin", data)  # multipart
    assert sandbox.files.get_info(f"{big}2.bin").size == len(data)
    sandbox.commands.run(f"rm {big}.bin {big}2.bin")


def _arrived(watcher: WatchHandle, count: int) -> list[tuple[str, str]]:
    """The next `count` events of a watcher the SDK polls (inotify reports them as they come)."""
    seen: list[tuple[str, str]] = []

    def enough() -> bool:
        seen.extend((e.name, e.type.value) for e in watcher.get_new_events())
        return len(seen) >= count

    wait_until(enough)
    return seen


def test_watch_dir(sandbox: Sandbox, e2b_server: E2bServer) -> None:
    watched = f"{e2b_server.scratch}/watched"
    sandbox.files.make_dir(watched)
    watcher = sandbox.files.watch_dir(watched)
    sandbox.files.write(f"{watched}/new.txt", "x")
    assert _arrived(watcher, 2) == [("new.txt", "create"), ("new.txt", "write")]
    sandbox.files.rename(f"{watched}/new.txt", f"{watched}/moved.txt")
    assert _arrived(watcher, 2) == [("new.txt", "rename"), ("moved.txt", "create")]
    sandbox.commands.run(f"chmod 600 {watched}/moved.txt")
    assert _arrived(watcher, 1) == [("moved.txt", "chmod")]
    sandbox.files.remove(f"{watched}/moved.txt")
    assert _arrived(watcher, 1) == [("moved.txt", "remove")]
    sandbox.commands.run(f"cd {watched} && echo x > brief && rm brief")  # between two polls
    assert _arrived(watcher, 3) == [("brief", "create"), ("brief", "write"), ("brief", "remove")]
    watcher.stop()


def test_watch_dir_recursive(sandbox: Sandbox, e2b_server: E2bServer) -> None:
    watched = f"{e2b_server.scratch}/watched-tree"
    sandbox.commands.run(f"mkdir -p {watched}/old")
    watcher = sandbox.files.watch_dir(watched, recursive=True)
    sandbox.files.write(f"{watched}/old/in-old.txt", "x")
    assert _arrived(watcher, 2) == [("old/in-old.txt", "create"), ("old/in-old.txt", "write")]
    sandbox.commands.run(f"mkdir -p {watched}/a/b && echo y > {watched}/a/b/deep.txt")
    seen = _arrived(watcher, 3)  # the file's write too, if made after its folder's watch began
    while ("a/b/deep.txt", "create") not in seen:
        seen += _arrived(watcher, 1)
    assert {("a", "create"), ("a/b", "create")} <= set(seen)
    creates = [e for e in seen if e[1] == "create"]
    assert len(creates) == len(set(creates)) == 3  # each said once, by the kernel or a walk
    sandbox.commands.run(f"echo z >> {watched}/a/b/deep.txt")
    wait_until(
        lambda: (
            ("a/b/deep.txt", "write") in [(e.name, e.type.value) for e in watcher.get_new_events()]
        )
    )
    watcher.stop()


def test_metrics_are_the_guests_cpu_and_memory(sandbox: Sandbox, e2b_server: E2bServer) -> None:
    points: list[SandboxMetrics] = []

    def sampled() -> bool:
        points[:] = sandbox.get_metrics()
        return bool(points)

    wait_until(sampled, timeout=15)  # the meter's second sample has CPU use
    last = points[-1]
    assert last.cpu_count == 1 and 0.0 <= last.cpu_used_pct <= 100.0
    assert 0 < last.mem_used < last.mem_total and 0 < last.mem_cache < last.mem_total
    assert 0 < last.disk_used < last.disk_total
    assert abs(last.timestamp.timestamp() - time.time()) < 30
    assert sandbox.get_metrics(start=datetime.now(UTC) + timedelta(minutes=1)) == []
    assert sandbox.get_metrics(end=datetime.now(UTC) - timedelta(days=1)) == []
    assert len(sandbox.get_metrics(start=last.timestamp, end=last.timestamp)) == 1
    refused = httpx.get(
        f"{e2b_server.url}/e2b/sandboxes/{sandbox.sandbox_id}/metrics?start=yesterday",
        headers={"X-API-KEY": e2b_server.key},
    )
    assert refused.json() == {"code": 400, "message": "start is Unix seconds"}


def test_pty_input_and_resize(sandbox: Sandbox) -> None:
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    sandbox.pty.resize(terminal.pid, PtySize(rows=30, cols=100))
    sandbox.pty.send_stdin(terminal.pid, b"stty size; exit 0\n")
    seen = bytearray()
    terminal.wait(on_pty=seen.extend)
    assert b"30 100" in seen


def test_timeout_extends_shortens_and_expires_on_time(e2b_server: E2bServer) -> None:
    sbx = Sandbox.create("base", timeout=2, envs=e2b_server.envs)
    sbx.set_timeout(30)
    assert sbx.get_info().end_at.timestamp() - time.time() > 25
    asked = time.time()
    sbx.set_timeout(2)
    end = sbx.get_info().end_at.timestamp()
    assert 2 <= end - asked <= 4  # whole seconds from creation, rounded up (and the request)
    wait_until(lambda: not sbx.is_running(), timeout=8)
    gone = time.time()
    # not before its end, and stopped within the watcher's round (a second) and the stop itself
    assert end <= gone <= end + 3.5
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sbx.sandbox_id)


def test_list_with_metadata_kill_and_other_orgs(sandbox: Sandbox, e2b_server: E2bServer) -> None:
    other = Sandbox.create("base", metadata={"suite": "other"}, envs=e2b_server.envs)
    found = Sandbox.list(query=SandboxQuery(metadata={"suite": "sync"})).next_items()
    assert [s.sandbox_id for s in found] == [sandbox.sandbox_id]
    assert found[0].metadata == {"suite": "sync"} and found[0].state.value == "running"
    assert Sandbox.list(api_key=e2b_server.other_key).next_items() == []
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sandbox.sandbox_id, api_key=e2b_server.other_key)
    assert not Sandbox.kill(sandbox.sandbox_id, api_key=e2b_server.other_key)
    assert other.kill()
    assert not other.is_running()
    with pytest.raises(SandboxNotRunningException):
        other.commands.run("true")  # a command to a killed sandbox


def test_errors_are_the_sdks(e2b_server: E2bServer) -> None:
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect("cmp-000000000000")
    with pytest.raises(AuthenticationException):
        Sandbox.create("base", api_key="sbk_not_a_key")


def test_get_host_reached_with_curl(sandbox: Sandbox, e2b_server: E2bServer) -> None:
    with socket.socket() as probe:  # the stand-in's guest shares this host's ports
        probe.bind(("127.0.0.1", 0))
        guest_port = probe.getsockname()[1]
    www = f"{e2b_server.scratch}/www"
    sandbox.files.write(f"{www}/index.html", "served from the sandbox")
    server = sandbox.commands.run(
        f"exec python3 -m http.server {guest_port} --bind 127.0.0.1", background=True, cwd=www
    )
    host = sandbox.get_host(guest_port)
    assert host == f"{guest_port}-{sandbox.sandbox_id}.localhost"
    port = e2b_server.url.rsplit(":", 1)[1]

    def answered() -> bool:
        got = subprocess.run(
            ["curl", "-sf", "--connect-to", f"{host}:80:127.0.0.1:{port}", f"http://{host}/"],
            capture_output=True,
            text=True,
            check=False,
        )
        return got.stdout == "served from the sandbox"

    wait_until(answered)
    assert server.kill()
    wait_until(lambda: not answered())

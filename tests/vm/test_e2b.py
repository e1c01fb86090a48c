"""E2B's SDK against a real server with real guests: what the component stand-in cannot show.
E2B's default user made on first use in `base` (`user`, /home/user, bash), root through
`user="root"`, and a pause with memory that keeps running processes across `connect`: one of its
own session, and a background command the SDK started (kept in the guest), whose output while
paused and after is read through `commands.connect`, then killed."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from e2b import CommandExitException, Sandbox

from .server import ServerProcess

pytestmark = [pytest.mark.vm, pytest.mark.e2b]


@pytest.fixture
def e2b_env(server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("E2B_API_KEY", server.key)
    monkeypatch.setenv("E2B_API_URL", f"{server.url}/e2b")
    monkeypatch.setenv("E2B_SANDBOX_URL", f"{server.url}/e2b-envd")
    yield


def ticks(handle: object, count: int) -> list[int]:
    """The numbers of the next `count` whole "tick N" lines the handle reads."""
    seen = ""
    for out, _err, _pty in handle:  # type: ignore[attr-defined]
        seen += out or ""
        found = [int(n) for n in re.findall(r"^tick (\d+)$", seen, re.M)]
        if len(found) >= count and seen.endswith("\n"):
            return found
    raise AssertionError(f"the command ended; it printed {seen!r}")


def test_default_user_root_and_pause_with_a_process_kept(e2b_env: None) -> None:
    sbx = Sandbox.create("base", timeout=600)
    try:
        me = sbx.commands.run('whoami; pwd; echo "$HOME"; echo "$SHELL"')
        assert me.stdout == "user\n/home/user\n/home/user\n/bin/bash\n"
        assert sbx.commands.run("whoami", user="root").stdout == "root\n"
        sbx.files.write("notes.txt", "kept")  # relative: under the user's home
        assert sbx.commands.run("stat -c %U /home/user/notes.txt").stdout == "user\n"
        # the folders made for a path are the user's, as envd's EnsureDirs makes them
        sbx.files.write("proj/src/a.py", "x")
        sbx.files.make_dir("/tmp/m/x")
        sbx.files.rename("proj/src/a.py", "moved/deep/a.py")
        folders = "/home/user/proj /home/user/proj/src /tmp/m /tmp/m/x /home/user/moved/deep /tmp"
        owners = sbx.commands.run(f"stat -c %U {folders}", user="root").stdout.split()
        assert owners == ["user"] * 5 + ["root"], owners
        sbx.commands.run("touch /home/user/proj/src/b.py")  # raises if the user may not

        sleeper = sbx.commands.run("setsid sleep 600 > /dev/null 2>&1 & echo $!").stdout.strip()
        ticker = sbx.commands.run(
            "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.3; done", background=True
        )
        before = ticks(ticker, 1)[-1]
        ticker.disconnect()
        sbx.pause()
        assert not sbx.is_running()
        assert Sandbox.get_info(sbx.sandbox_id).state.value == "paused"
        again = Sandbox.connect(sbx.sandbox_id)
        assert again.is_running()
        assert again.commands.run(f"kill -0 {sleeper} && echo alive").stdout == "alive\n"
        assert again.files.read("/home/user/notes.txt") == "kept"

        assert ticker.pid in [p.pid for p in again.commands.list()]
        handle = again.commands.connect(ticker.pid)
        after = ticks(handle, 3)
        assert after[0] > before and after == list(range(after[0], after[0] + len(after)))
        assert again.commands.kill(ticker.pid)
        with pytest.raises(CommandExitException) as killed:
            handle.wait()
        assert killed.value.exit_code == -1  # as envd: a process a signal ended did not exit
        assert ticker.pid not in [p.pid for p in again.commands.list()]
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_watch_a_tree_and_metrics_in_a_real_guest(e2b_env: None) -> None:
    """inotify in a real guest's agent (recursive, a rename), and the guest's own CPU and memory
    through `get_metrics`."""
    sbx = Sandbox.create("base", timeout=600)
    try:
        sbx.commands.run("mkdir -p /tmp/w/old")
        watcher = sbx.files.watch_dir("/tmp/w", recursive=True)
        sbx.files.write("/tmp/w/old/a.txt", "a")
        sbx.commands.run(
            "mkdir -p /tmp/w/new/er && echo b > /tmp/w/new/er/b && mv /tmp/w/old/a.txt /tmp/w/c"
        )
        seen: list[tuple[str, str]] = []
        deadline = time.monotonic() + 30
        while ("c", "create") not in seen:
            assert time.monotonic() < deadline, f"events so far: {seen}"
            seen += [(e.name, e.type.value) for e in watcher.get_new_events()]
            time.sleep(0.1)  # between two polls of the SDK's own
        assert seen[:2] == [("old/a.txt", "create"), ("old/a.txt", "write")]
        wanted = {("new", "create"), ("new/er", "create"), ("old/a.txt", "rename")}
        assert wanted <= set(seen)
        watcher.stop()

        deadline = time.monotonic() + 60  # the meter samples every 5 s; the second has CPU use
        while not (points := sbx.get_metrics()):
            assert time.monotonic() < deadline, "no metrics in 60 s"
            time.sleep(0.5)  # between two polls
        last = points[-1]
        assert last.cpu_count == 1 and 0.0 <= last.cpu_used_pct <= 100.0
        assert 0 < last.mem_used < last.mem_total <= 512 * 2**20
        assert 0 < last.disk_used < last.disk_total
    finally:
        sbx.kill()


def test_a_command_s_timeout_is_not_counted_while_paused(e2b_env: None) -> None:
    """envd counts a command's `timeout` on the guest's clock, which a pause stops: a command
    paused for longer than its timeout had left runs on after the resume for the rest of it, then
    is killed (it was killed the moment its sandbox was resumed)."""
    sbx = Sandbox.create("base", timeout=600)
    try:
        handle = sbx.commands.run("sleep 120", background=True, timeout=20)
        handle.disconnect()
        sbx.pause()
        time.sleep(25)  # paused past the whole of its timeout: the pause is what is measured
        again = Sandbox.connect(sbx.sandbox_id)
        resumed = time.monotonic()
        assert handle.pid in [p.pid for p in again.commands.list()]  # not killed at the resume
        with pytest.raises(CommandExitException) as killed:
            again.commands.connect(handle.pid).wait()
        assert killed.value.error == "signal: killed"
        assert 1 < time.monotonic() - resumed < 60  # the rest of its 20 s, from the resume
    finally:
        Sandbox.kill(sbx.sandbox_id)

"""A server killed (SIGKILL, at a named step: `SANBOX_TEST_CRASH_AT`, host/machines/faults.py) in
the middle of a fork, a create from a snapshot or a pool claim, then started again: no computer
runs with its source's hostname or machine-id, the source runs (its vCPUs too: an exec answers),
and nothing is left half-made (a fork is all or none; a copy is given its identity or removed).

Also the faults of the honest-outcome rule through the real server: a full data filesystem and a
killed QEMU under a pause, a snapshot (saved with the vCPUs stopped, and live) and a
fork answer an error with a stable code that says what state the computer is in, never success
(a fork of a computer its server already saw stop is one from its disk, and says so). The
live-save tests run a server with SANBOX_SNAPSHOT=live, the others with =stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sanbox import Sanbox
from sanbox.host.data.layout import DataDir
from sanbox.sdk import Computer
from sanbox.sdk.errors import SanboxError

from ..internet import Internet
from .conftest import server_env, skip_unless_live_saves, wait_for
from .server import ServerProcess

pytestmark = pytest.mark.vm

FORK_STEPS = [
    "fork.children_recorded",
    "snapshot.vcpus_stopped",
    "snapshot.state_saved",
    "restore.before_identity",
    "restore.after_identity",
]
COPY_STEPS = ["restore.before_identity", "restore.after_identity"]


def _crashable(data_dir: DataDir, internet: Internet, live: bool) -> Iterator[ServerProcess]:
    """A server of its own (a crash must not take the shared one down), removed after; with
    `live`, its memory snapshots are saved as the guest runs (SANBOX_SNAPSHOT=live), else with
    its vCPUs stopped (=stopped)."""
    env = {**server_env(internet), "SANBOX_SNAPSHOT": "live" if live else "stopped"}
    srv = ServerProcess(data_dir, f"crash-{os.urandom(3).hex()}", env)
    srv.start()
    yield srv
    srv.env.pop("SANBOX_TEST_CRASH_AT", None)
    if srv.proc is None or srv.proc.poll() is not None:
        srv.start()
    with Sanbox(srv.url, srv.key, timeout=600) as client:
        for c in client.computers.list():
            c.delete()
    srv.remove()


@pytest.fixture
def crashable(data_dir: DataDir, internet: Internet) -> Iterator[ServerProcess]:
    """Memory snapshots with the vCPUs stopped while the memory is saved (the default where
    the hypervisor cannot save live; here wherever it runs)."""
    yield from _crashable(data_dir, internet, live=False)


@pytest.fixture
def live_crashable(data_dir: DataDir, internet: Internet) -> Iterator[ServerProcess]:
    """Memory snapshots saved as the guest runs: its own steps and faults."""
    skip_unless_live_saves(data_dir)
    yield from _crashable(data_dir, internet, live=True)


def crash_at(srv: ServerProcess, step: str, doing: object) -> None:
    """Restart `srv` armed at `step`, run `doing(client)`, which the crash cuts off; then start
    it again, unarmed."""
    srv.stop()
    srv.env["SANBOX_TEST_CRASH_AT"] = step
    srv.start()
    with (
        Sanbox(srv.url, srv.key, timeout=600) as client,
        contextlib.suppress(httpx.HTTPError, SanboxError),
    ):
        doing(client)  # type: ignore[operator]
    assert srv.proc is not None
    assert srv.proc.wait(120) == -signal.SIGKILL, f"the server did not die at {step}"
    del srv.env["SANBOX_TEST_CRASH_AT"]
    srv.start()


def identity(c: Computer) -> tuple[str, str]:
    r = c.exec("hostname; cat /etc/machine-id", timeout=120)
    host, mid = r.stdout.split()
    return host, mid


def no_one_else_is(client: Sanbox, source: Computer, ids: tuple[str, str]) -> None:
    for c in client.computers.list():
        if c.id != source.id and c.state == "running":
            host, mid = identity(c)
            assert host == c.name and host != ids[0] and mid != ids[1], (c.name, host, mid)


def qemu_of(srv: ServerProcess, computer_id: str) -> list[int]:
    """The computer's hypervisor processes: those whose command line names its folder and
    whose program is QEMU (a `qemu-img` or a helper working on its disk is not its QEMU)."""
    out = subprocess.run(
        ["pgrep", "-f", f"{srv.data_dir.computers}/{computer_id}/"], capture_output=True, text=True
    )
    return [int(p) for p in out.stdout.split() if _program(int(p)).startswith("qemu-system")]


def _program(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:  # it ended between the two looks
        return ""


@pytest.mark.parametrize("step", FORK_STEPS)
def test_a_server_killed_mid_fork_leaves_the_source_running_and_no_fork(
    crashable: ServerProcess, step: str
) -> None:
    with Sanbox(crashable.url, crashable.key, timeout=600) as client:
        src = client.computers.create(name="src", idle_timeout=0)
        src.exec("echo before > /root/f; sync")
        ids = identity(src)
    crash_at(crashable, step, lambda cl: cl.computers.get("src").fork(count=2, name="kid"))
    with Sanbox(crashable.url, crashable.key, timeout=600) as client:
        got = client.computers.get("src")
        assert got.state == "running"
        assert got.exec("cat /root/f", timeout=120).stdout == "before\n"  # its vCPUs run
        assert identity(got) == ids
        assert [c.name for c in client.computers.list()] == ["src"], "a fork was left behind"
        assert sorted(p.name for p in crashable.data_dir.computers.iterdir()) == [src.id]
        assert not list(crashable.data_dir.snapshots.glob("*")), "the fork's snapshot stayed"
        if step.startswith("snapshot."):
            assert any(e.type == "computer.continued" for e in got.events())


@pytest.mark.parametrize("step", ["snapshot.vcpus_stopped", "snapshot.state_saved"])
def test_a_server_killed_mid_live_snapshot_leaves_the_computer_running(
    live_crashable: ServerProcess, step: str
) -> None:
    """A memory snapshot is saved as the guest runs: killed where QEMU holds the vCPUs stopped
    for the last pages (the migration waiting before its switchover) or after it ended, the
    restarted server lets the guest run on, lists no snapshot, and the next one works."""
    crashable = live_crashable
    with Sanbox(crashable.url, crashable.key, timeout=600) as client:
        src = client.computers.create(name="src", idle_timeout=0)
        src.exec("echo before > /root/f; sync")
    crash_at(crashable, step, lambda cl: cl.computers.get("src").snapshot(memory=True))
    with Sanbox(crashable.url, crashable.key, timeout=600) as client:
        got = client.computers.get("src")
        assert got.state == "running"
        assert got.exec("cat /root/f", timeout=120).stdout == "before\n"  # its vCPUs run
        assert any(e.type == "computer.continued" for e in got.events())
        assert not client.snapshots.list(), "a half-made snapshot is listed"
        again = got.snapshot(memory=True)
        assert again.memory
        client.snapshots.delete(again.id)


@pytest.mark.parametrize("step", COPY_STEPS)
def test_a_server_killed_before_a_copy_had_its_identity_gives_it_one(
    crashable: ServerProcess, step: str
) -> None:
    with Sanbox(crashable.url, crashable.key, timeout=600) as client:
        src = client.computers.create(name="src", idle_timeout=0)
        src.exec("nohup sleep 10000 >/dev/null 2>&1 &")
        ids = identity(src)
        src.snapshot(memory=True, name="s")
    crash_at(crashable, step, lambda cl: cl.computers.create(name="copy", from_snapshot="s"))
    with Sanbox(crashable.url, crashable.key, timeout=600) as client:
        names = {c.name: c for c in client.computers.list()}
        assert names["src"].state == "running"
        no_one_else_is(client, names["src"], ids)
        if "copy" in names:  # given its identity, or gone whole
            copy = names["copy"]
            assert copy.state == "running" and copy.exec("pgrep -x sleep").exit_code == 0
        else:
            assert not [
                p for p in crashable.data_dir.computers.iterdir() if p.name != names["src"].id
            ]


def test_a_server_killed_mid_claim_finishes_the_claim(crashable: ServerProcess) -> None:
    with Sanbox(crashable.url, crashable.key, timeout=600) as client:
        client.pools.set("base", 1)
        wait_for(lambda: any(p.ready == 1 for p in client.pools.list()), "1 ready member")
    crash_at(
        crashable, "pool.claimed", lambda cl: cl.computers.create(template="base", name="claimed")
    )
    with Sanbox(crashable.url, crashable.key, timeout=600) as client:
        c = client.computers.get("claimed")
        assert c.state == "running"
        assert c.exec("hostname", timeout=120).stdout.strip() == "claimed"
        assert any(e.type == "computer.identity" for e in c.events())
        client.pools.set("base", 0)


# a full data filesystem and a killed QEMU under pause, snapshot and fork ------------------------


# each verb on a server that saves memory snapshots the default way, and a snapshot saved live too
EACH_VERB = pytest.mark.parametrize(
    ("verb", "server"),
    [
        ("pause", "crashable"),
        ("snapshot", "crashable"),
        ("snapshot", "live_crashable"),
        ("fork", "crashable"),
    ],
)


@contextlib.contextmanager
def full(path: os.PathLike[str]) -> Iterator[None]:
    """`path` on a 1 MiB filesystem of its own (as test_fork_faults.py fills it)."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "sanbox-enospc", str(path)], check=True
    )
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


@EACH_VERB
def test_a_full_data_filesystem_fails_the_verb_and_says_it_still_runs(
    request: pytest.FixtureRequest, verb: str, server: str
) -> None:
    crashable: ServerProcess = request.getfixturevalue(server)
    with Sanbox(crashable.url, crashable.key, timeout=600) as client:
        c = client.computers.create(name=f"full-{verb}", idle_timeout=0)
        c.exec("head -c 8M /dev/urandom > /run/fill")
        where = (
            crashable.data_dir.computer(c.id).state
            if verb == "pause"
            else (crashable.data_dir.snapshots)
        )
        with full(where), pytest.raises(SanboxError) as raised:
            if verb == "pause":
                c.pause()
            elif verb == "snapshot":
                c.snapshot(memory=True)
            else:
                c.fork(count=1)
        err = raised.value
        assert err.status is not None and err.status >= 500
        assert err.message.startswith(f"{verb} failed") and "still running" in err.message, err
        if verb == "pause":
            assert err.code == "pause_failed" and "no space left" in err.message
        assert c.refresh().state == "running"
        assert c.exec("echo on").stdout == "on\n"
        assert [x.name for x in client.computers.list()] == [c.name]


@EACH_VERB
def test_a_killed_qemu_fails_the_verb_and_says_it_stopped(
    request: pytest.FixtureRequest, verb: str, server: str
) -> None:
    crashable: ServerProcess = request.getfixturevalue(server)
    with Sanbox(crashable.url, crashable.key, timeout=600) as client:
        c = client.computers.create(name=f"killed-{verb}", idle_timeout=0)
        for pid in qemu_of(crashable, c.id):
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not qemu_of(crashable, c.id), "its QEMU gone")
        if verb == "fork":
            try:
                forks = c.fork(count=1)
            except SanboxError as exc:
                assert exc.code in ("computer_not_running", "fork_failed"), exc
            else:  # the server saw its VM end first: a stopped computer forks from its disk
                assert [f.memory for f in forks] == ["lost"], "a fork claims memory it lacks"
                assert any(e.type == "computer.vm_exited" for e in c.events())
                for fork in forks:
                    fork.delete()
        else:
            with pytest.raises(SanboxError) as raised:
                if verb == "pause":
                    c.pause()
                else:
                    c.snapshot(memory=True)
            assert raised.value.code in ("computer_not_running", f"{verb}_failed")
        assert c.refresh().state == "stopped"
        assert [x.name for x in client.computers.list()] == [c.name]

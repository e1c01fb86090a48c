"""The honest-outcome rule for the verbs test_crash_recovery.py does not cover (stop, start,
restart, resume, delete), through a real server with real faults: a QEMU killed under the verb,
a full filesystem where the verb writes, files that cannot be removed. A verb that did not do
what was asked answers an error with a stable code and says what state the computer is in; a
verb that did (a stop of a computer whose QEMU died is a stop) says so; nothing runs twice and
nothing half-made stays."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sanbox import Sanbox
from sanbox.host.data.layout import DataDir
from sanbox.sdk import Computer
from sanbox.sdk.errors import SanboxError

from ..internet import Internet
from .conftest import immutable, server_env, wait_for
from .server import ServerProcess
from .test_crash_recovery import qemu_of

pytestmark = pytest.mark.vm


@pytest.fixture(scope="module")
def srv(data_dir: DataDir, internet: Internet) -> Iterator[ServerProcess]:
    """One server of the module's own: its computers are killed and broken on purpose."""
    server = ServerProcess(data_dir, f"faults-{os.urandom(3).hex()}", server_env(internet))
    server.start()
    yield server
    with Sanbox(server.url, server.key, timeout=600) as client:
        for c in client.computers.list():
            c.delete()
    server.remove()


@pytest.fixture
def client(srv: ServerProcess) -> Iterator[Sanbox]:
    with Sanbox(srv.url, srv.key, timeout=600) as c:
        yield c


@pytest.fixture(scope="module")
def broken(srv: ServerProcess) -> Iterator[Computer]:
    """One computer the fault tests take turns to break: each leaves it running again on its
    kept disk (`works_again`), so the next starts from a running computer without a boot."""
    with Sanbox(srv.url, srv.key, timeout=600) as client:
        c = client.computers.create(name="broken", idle_timeout=0)
        yield c
        with contextlib.suppress(SanboxError):
            c.delete()


@pytest.fixture
def computer(broken: Computer) -> Computer:
    if broken.refresh().state != "running":  # a test before this one failed half way
        broken.start()
    return broken


@pytest.fixture
def fresh(client: Sanbox, request: pytest.FixtureRequest) -> Iterator[Computer]:
    """A computer of the test's own (the delete tests end it)."""
    name = request.node.name[5:40].replace("_", "-").replace("[", "-").strip("-]")
    c = client.computers.create(name=name, idle_timeout=0)
    yield c
    with contextlib.suppress(SanboxError):
        c.delete()


def kill_qemu(srv: ServerProcess, computer_id: str) -> None:
    for pid in qemu_of(srv, computer_id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not qemu_of(srv, computer_id), "its QEMU gone", 30)


@contextlib.contextmanager
def killer(srv: ServerProcess, computer_id: str) -> Iterator[threading.Event]:
    """Kill the computer's next QEMU as soon as it appears (once), while the block runs; one
    running already is left to the verb (a restart ends it itself)."""
    done, killed = threading.Event(), threading.Event()
    before = set(qemu_of(srv, computer_id))

    def watch() -> None:
        while not done.is_set():
            pids = set(qemu_of(srv, computer_id)) - before
            if pids:
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                killed.set()
                return
            done.wait(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield killed
    finally:
        done.set()
        thread.join(5)


@contextlib.contextmanager
def full(path: Path) -> Iterator[None]:
    """`path` on a small filesystem of its own, filled to the last byte."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0711", "sanbox-enospc", str(path)],
        check=True,
    )
    try:
        with contextlib.suppress(OSError), open(path / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def refused(verb: Callable[[], object]) -> SanboxError:
    with pytest.raises(SanboxError) as raised:
        verb()
    return raised.value


def works_again(c: Computer, srv: ServerProcess) -> None:
    """After the fault: a start boots it on its kept disk, with one QEMU, and it answers."""
    c.start()
    assert c.refresh().state == "running"
    assert c.exec("cat /root/kept").stdout == "kept\n"
    assert len(qemu_of(srv, c.id)) == 1


def test_a_stop_after_its_qemu_was_killed_says_stopped_and_nothing_runs(
    computer: Computer, srv: ServerProcess
) -> None:
    computer.exec("echo kept > /root/kept; sync")
    kill_qemu(srv, computer.id)
    try:
        computer.stop()  # the stop may come first ...
    except SanboxError as err:  # ... or the watcher, which found it gone: then it is stopped
        assert err.code == "invalid_transition", err
    assert computer.refresh().state == "stopped"
    assert "exited" in (computer.last_error or "") or computer.last_error is None
    assert not qemu_of(srv, computer.id)
    works_again(computer, srv)


def test_a_stop_with_a_full_data_filesystem_still_stops(
    computer: Computer, srv: ServerProcess
) -> None:
    computer.exec("echo kept > /root/kept; sync")
    with full(srv.data_dir.computer(computer.id).state):
        stopped = computer.stop()
    assert stopped.state == "stopped"
    assert not qemu_of(srv, computer.id)
    works_again(computer, srv)


@pytest.mark.parametrize("verb", ["start", "restart"])
def test_a_qemu_killed_while_booting_fails_the_verb_and_says_error(
    computer: Computer, srv: ServerProcess, verb: str
) -> None:
    computer.exec("echo kept > /root/kept; sync")
    if verb == "start":
        computer.stop()
    with killer(srv, computer.id) as killed:
        err = refused(computer.start if verb == "start" else computer.restart)
    assert killed.is_set()
    assert err.status is not None and err.status >= 500, err
    assert err.code in ("vm_start_failed", "agent_unavailable"), err
    assert "the computer is in error" in err.message, err
    assert computer.refresh().state == "error"
    assert computer.last_error, "an error state says why"
    assert not qemu_of(srv, computer.id)
    works_again(computer, srv)


def test_a_start_with_a_full_run_folder_fails_and_says_error(
    computer: Computer, srv: ServerProcess
) -> None:
    computer.exec("echo kept > /root/kept; sync")
    computer.stop()
    with full(srv.data_dir.computer(computer.id).run):
        err = refused(computer.start)
    assert err.status is not None and err.status >= 500, err
    assert "the computer is in error" in err.message, err
    assert computer.refresh().state == "error"
    assert not qemu_of(srv, computer.id)
    works_again(computer, srv)


def test_a_resume_whose_qemu_is_killed_never_says_restored(
    computer: Computer, srv: ServerProcess
) -> None:
    computer.exec("echo kept > /root/kept; sync")
    computer.pause()
    with killer(srv, computer.id) as killed:
        try:
            resumed: Computer | None = computer.resume()
        except SanboxError as err:
            assert err.status is not None and err.status >= 500, err
            assert "the computer is in error" in err.message, err
            resumed = None
    assert killed.is_set()
    if resumed is None:  # the restore failed: an error, with the reason
        assert computer.refresh().state == "error" and computer.last_error
        assert not qemu_of(srv, computer.id)
        works_again(computer, srv)
    else:  # its restored VM died, so it booted fresh: and says so
        assert resumed.state == "running" and resumed.memory == "lost", resumed
        assert resumed.memory_reason
        assert computer.exec("cat /root/kept").stdout == "kept\n"
        assert len(qemu_of(srv, computer.id)) == 1


def test_a_delete_that_cannot_remove_its_files_says_delete_failed_then_deletes(
    fresh: Computer, client: Sanbox, srv: ServerProcess
) -> None:
    stuck = srv.data_dir.computer(fresh.id).root / "stuck"
    stuck.write_bytes(b"")
    with immutable(stuck):  # not even root may unlink it
        err = refused(fresh.delete)
        assert (err.status, err.code) == (500, "delete_failed"), err
        assert "delete it again" in err.message
        assert fresh.refresh().state == "error"
        assert fresh.name in [c.name for c in client.computers.list()]
        assert not qemu_of(srv, fresh.id), "a failed delete still ended its VM"
    fresh.delete()
    assert fresh.name not in [c.name for c in client.computers.list()]
    assert not srv.data_dir.computer(fresh.id).root.exists()


def test_a_delete_after_its_qemu_was_killed_leaves_nothing(
    fresh: Computer, client: Sanbox, srv: ServerProcess
) -> None:
    kill_qemu(srv, fresh.id)
    fresh.delete()
    assert fresh.name not in [c.name for c in client.computers.list()]
    assert not srv.data_dir.computer(fresh.id).root.exists()

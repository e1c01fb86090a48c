"""A verb that did not do what was asked never answers success: it answers a stable code and a
message saying what happened and what state the computer is in now, even when the computer was
left safely as it was; the CLI says so in one line and exits non-zero. The faults are real: the
local 'VM' has no hypervisor monitor (so a pause or a snapshot of it running cannot save it),
and a mount inside a computer's folder keeps its files from being removed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sanbox.cli.main import app
from sanbox.fleet.link.link import HostUnreachableError
from sanbox.host.drivers.errors import SavedStateError, VmmError
from sanbox.host.drivers.local.launch import LocalVm
from sanbox.host.machines.machine import Machine, MachineSpec
from sanbox.host.runtime import HostRuntime
from sanbox.host.saved import memory
from sanbox.host.saved.memory import SavedState

from .conftest import LiveServer, Server
from .test_api_computers import create, error

pytestmark = pytest.mark.component


def test_a_pause_that_cannot_save_answers_pause_failed_and_still_runs(server: Server) -> None:
    h = server.headers()
    create(server, name="busy")
    r = server.client.post("/v1/computers/busy/pause", headers=h)
    assert error(r) == (500, "pause_failed"), r.text
    message = r.json()["error"]["message"]
    assert message.startswith("pause failed: ") and "still running" in message
    assert server.client.get("/v1/computers/busy", headers=h).json()["state"] == "running"
    ran = server.client.post("/v1/computers/busy/exec", json={"cmd": ["echo", "on"]}, headers=h)
    assert ran.status_code == 200 and ran.json()["stdout"] == "on\n"
    events = server.client.get("/v1/computers/busy/events", headers=h).json()["events"]
    assert events[-1]["type"] == "computer.pause_failed"


def saves_as_a_hypervisor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local 'VM' saves a state as a hypervisor does, its RAM in the stream (it has no
    monitor of its own): a pause of it goes on to write and commit the state."""

    async def save_state(vm: LocalVm, vmstate: Path) -> bool:
        vmstate.write_bytes(b"devices and ram")
        return True

    def split(vm: LocalVm, stream: Path, vmstate: Path, memory: Path, size: int) -> None:
        vmstate.write_bytes(b"devices")
        with open(memory, "wb") as f:
            f.write(b"ram")
            f.truncate(size)

    monkeypatch.setattr(LocalVm, "save_state", save_state)
    monkeypatch.setattr(LocalVm, "split_saved_state", split)


def plant_saved_state(server: Server, computer_id: str) -> HostRuntime:
    """A complete saved state in a computer's state dir, genuine under this host's key, as a
    pause leaves it; the runtime, to ask about it."""
    runtime: HostRuntime = server.client.app.state.computers.fleet.runtime  # type: ignore[attr-defined]
    state = server.data_dir.computer(computer_id).state
    state.mkdir(parents=True, exist_ok=True)
    ram, devices = state.parent / "ram", state / "vmstate.tmp"
    ram.write_bytes(b"ram" * 4096)
    devices.write_bytes(b"devices")
    memory.write(state, devices, ram, {}, time.monotonic(), runtime.memory_key)
    ram.unlink()
    assert runtime.has_saved_memory(computer_id)
    return runtime


def said(server: Server, name: str) -> tuple[str, str]:
    """A computer's state now, and the message of its last event."""
    h = server.headers()
    state = server.client.get(f"/v1/computers/{name}", headers=h).json()["state"]
    events = server.client.get(f"/v1/computers/{name}/events", headers=h).json()["events"]
    return state, events[-1]["message"]


def test_a_pause_whose_vm_died_answers_pause_failed_and_the_computer_is_stopped(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def dies(vm: LocalVm, vmstate: Path) -> bool:
        os.kill(vm.pid, signal.SIGKILL)
        await vm.wait_exit(5.0)
        raise VmmError("the hypervisor went away while it saved the state")

    monkeypatch.setattr(LocalVm, "save_state", dies)
    h = server.headers()
    create(server, name="dies")
    r = server.client.post("/v1/computers/dies/pause", headers=h)
    assert error(r) == (500, "pause_failed"), r.text
    assert "the computer is stopped" in r.json()["error"]["message"]
    state, message = said(server, "dies")
    assert state == "stopped" and "its VM died during a pause" in message, (state, message)
    assert server.client.post("/v1/computers/dies/start", headers=h).status_code == 200


def test_a_pause_that_fails_otherwise_leaves_it_running_as_it_was(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuses(rt: HostRuntime, m: Machine, spec: MachineSpec, *_: object) -> SavedState:
        raise VmmError("the hypervisor refused")

    monkeypatch.setattr(HostRuntime, "pause", refuses)
    h = server.headers()
    create(server, name="refused")
    r = server.client.post("/v1/computers/refused/pause", headers=h)
    assert error(r) == (500, "pause_failed"), r.text
    assert "still running as it was" in r.json()["error"]["message"]
    assert said(server, "refused")[0] == "running"
    ran = server.client.post("/v1/computers/refused/exec", json={"cmd": ["true"]}, headers=h)
    assert ran.status_code == 200 and ran.json()["exit_code"] == 0


def test_a_pause_whose_host_did_not_answer_is_in_error_not_pausing(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def lost(rt: HostRuntime, m: Machine, spec: MachineSpec, *_: object) -> SavedState:
        raise HostUnreachableError("host h1 dropped the call pause: no answer")

    monkeypatch.setattr(HostRuntime, "pause", lost)
    h = server.headers()
    create(server, name="unanswered")
    r = server.client.post("/v1/computers/unanswered/pause", headers=h)
    assert error(r) == (500, "pause_failed"), r.text
    assert "not known" in r.json()["error"]["message"]
    got = server.client.get("/v1/computers/unanswered", headers=h).json()
    assert got["state"] == "error" and "not known" in got["last_error"], got


def test_a_start_after_an_unanswered_pause_looks_at_the_memory_it_saved(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause whose answer was lost may have ended on its host (its VM gone, its memory saved):
    the computer is in error, and a start then takes that memory if it is whole (as a resume
    checks it), else boots afresh saying why; it booted afresh and dropped the memory unlooked
    at. (Here the saved state is genuine but not this VM's kind, so it is refused, and said.)
    With no saved memory, the start says that is why it booted afresh."""
    original = HostRuntime.pause

    async def ended_unanswered(
        rt: HostRuntime, m: Machine, spec: MachineSpec, *_: object
    ) -> SavedState:
        await rt.kill(spec.computer_id)
        plant_saved_state(server, spec.computer_id)
        raise HostUnreachableError("host h1 dropped the call pause: no answer")

    monkeypatch.setattr(HostRuntime, "pause", ended_unanswered)
    h = server.headers()
    create(server, name="saved")
    assert error(server.client.post("/v1/computers/saved/pause", headers=h))[1] == "pause_failed"
    assert said(server, "saved")[0] == "error"
    r = server.client.post("/v1/computers/saved/start", headers=h)
    assert r.status_code == 200 and r.json()["state"] == "running", r.text
    state, message = said(server, "saved")
    assert message.startswith("resumed") and "memory: lost" in message, message
    assert "stop drops memory" not in message

    monkeypatch.setattr(HostRuntime, "pause", original)

    async def failed_unanswered(rt: HostRuntime, m: Machine, spec: MachineSpec, *_: object) -> None:
        await rt.kill(spec.computer_id)
        raise HostUnreachableError("host h1 dropped the call pause: no answer")

    monkeypatch.setattr(HostRuntime, "pause", failed_unanswered)
    create(server, name="unsaved")
    assert error(server.client.post("/v1/computers/unsaved/pause", headers=h))[1] == "pause_failed"
    assert server.client.post("/v1/computers/unsaved/start", headers=h).status_code == 200
    assert "it was in error, with no saved memory" in said(server, "unsaved")[1]


def test_no_resume_starts_a_second_vm_on_a_running_computers_disk(server: Server) -> None:
    """A resume (a start that found saved memory, while a VM that would not end still runs: a
    pause that froze it) is refused as a boot is, not run beside it on the same disk."""
    from sanbox.host.errors import HostError

    made = create(server, name="twice")
    runtime = plant_saved_state(server, str(made["id"]))
    fleet = server.client.app.state.computers.fleet  # type: ignore[attr-defined]
    row = fleet.by_id(str(made["id"]))

    async def again() -> None:
        with pytest.raises(HostError, match="already running"):
            await runtime.resume(fleet.spec(row), fleet.image_of(row))

    server.client.portal.call(again)  # type: ignore[union-attr]
    assert runtime.has_saved_memory(str(made["id"]))  # nothing taken


def test_a_fresh_boot_drops_saved_memory_its_disk_moves_past(server: Server) -> None:
    h = server.headers()
    made = create(server, name="fresh")
    assert server.client.post("/v1/computers/fresh/stop", headers=h).status_code == 200
    runtime = plant_saved_state(server, str(made["id"]))  # a pause whose answer was lost
    r = server.client.post("/v1/computers/fresh/start", headers=h)
    assert r.status_code == 200 and r.json()["state"] == "running", r.text
    assert not runtime.has_saved_memory(str(made["id"]))


def test_a_pause_whose_vm_cannot_run_on_after_a_failed_write_ends_it_stopped(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    saves_as_a_hypervisor(monkeypatch)

    def unreadable(vm: LocalVm, *_: object) -> None:
        raise SavedStateError("the stream ends early")

    async def stuck(vm: LocalVm) -> None:
        raise VmmError("the monitor does not answer")

    monkeypatch.setattr(LocalVm, "split_saved_state", unreadable)
    monkeypatch.setattr(LocalVm, "continue_running", stuck)
    h = server.headers()
    made = create(server, name="stuck")
    r = server.client.post("/v1/computers/stuck/pause", headers=h)
    assert error(r) == (500, "pause_failed"), r.text
    assert "the computer is stopped" in r.json()["error"]["message"]
    assert said(server, "stuck")[0] == "stopped"
    state = server.data_dir.computer(str(made["id"])).state
    assert sorted(p.name for p in state.iterdir()) == [], "a failed pause leaves no files"


def test_a_pause_whose_vm_did_not_end_runs_on_with_no_saved_memory(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    saves_as_a_hypervisor(monkeypatch)
    kill = LocalVm.kill
    tries: list[int] = []

    async def unkillable_at_first(vm: LocalVm, timeout: float = 5.0) -> None:
        tries.append(vm.pid)
        if len(tries) <= 2:  # the pause's quit, then its kill
            raise VmmError("the VM process could not be checked: not killed")
        await kill(vm, timeout)

    monkeypatch.setattr(LocalVm, "quit", unkillable_at_first)
    monkeypatch.setattr(LocalVm, "kill", unkillable_at_first)
    h = server.headers()
    made = create(server, name="unending")
    r = server.client.post("/v1/computers/unending/pause", headers=h)
    assert error(r) == (500, "pause_failed"), r.text
    assert "still running as it was" in r.json()["error"]["message"]
    assert said(server, "unending")[0] == "running"
    runtime = server.client.app.state.computers.fleet.runtime  # type: ignore[attr-defined]
    assert not runtime.has_saved_memory(str(made["id"]))
    ran = server.client.post("/v1/computers/unending/exec", json={"cmd": ["true"]}, headers=h)
    assert ran.status_code == 200 and ran.json()["exit_code"] == 0


def test_a_snapshot_that_failed_says_so_and_what_the_computer_is_now(server: Server) -> None:
    h = server.headers()
    create(server, name="snapped")
    r = server.client.post("/v1/computers/snapped/snapshots", json={"memory": True}, headers=h)
    assert r.status_code >= 500, r.text
    message = r.json()["error"]["message"]
    assert message.startswith("snapshot failed: ")
    assert message.endswith("no snapshot was kept; the computer is still running as it was")
    assert server.client.get("/v1/snapshots", headers=h).json()["snapshots"] == []
    assert server.client.get("/v1/computers/snapped", headers=h).json()["state"] == "running"
    # a snapshot that can be taken still is (a stopped computer's disk)
    assert server.client.post("/v1/computers/snapped/stop", headers=h).status_code == 200
    r = server.client.post("/v1/computers/snapped/snapshots", json={}, headers=h)
    assert r.status_code == 201, r.text


@pytest.fixture
def pinned(server: Server) -> Iterator[Path]:
    """A computer whose folder holds a mount point: its files cannot all be removed."""
    made = create(server, name="pinned")
    point = server.data_dir.computer(str(made["id"])).root / "pinned"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "sanbox-pin", str(point)], check=True)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_a_delete_that_leaves_files_answers_delete_failed(server: Server, pinned: Path) -> None:
    h = server.headers()
    r = server.client.delete("/v1/computers/pinned", headers=h)
    assert error(r) == (500, "delete_failed"), r.text
    assert "delete it again" in r.json()["error"]["message"]
    got = server.client.get("/v1/computers/pinned", headers=h).json()
    assert got["state"] == "error" and got["last_error"].startswith("delete failed: ")
    subprocess.run(["umount", str(pinned)], check=True)
    r = server.client.delete("/v1/computers/pinned", headers=h)
    assert r.status_code == 200, r.text
    assert server.client.get("/v1/computers/pinned", headers=h).status_code == 404
    assert not pinned.parent.exists()


def test_the_cli_says_a_pause_failed_in_one_line_and_exits_non_zero(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANBOX_URL", live_server.url)
    monkeypatch.setenv("SANBOX_API_KEY", live_server.key)
    runner = CliRunner()
    assert runner.invoke(app, ["create", "--name", "cli-pause"]).exit_code == 0
    r = runner.invoke(app, ["pause", "cli-pause"])
    assert r.exit_code == 1, r.output
    said = [line for line in r.output.splitlines() if line.strip()]
    assert len(said) == 1 and "pause_failed" in said[0] and "still running" in said[0], said
    assert "Traceback" not in r.output
    assert runner.invoke(app, ["rm", "cli-pause"]).exit_code == 0

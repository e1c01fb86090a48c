"""The driver's process handling end to end, with a stand-in for the Firecracker binary: a small
Python program that takes Firecracker's arguments (`--id`, `--api-sock`, `--config-file`), reads
the config file and answers the API on its socket. It shows what the driver does around the
process (launcher, pidfile, record, readiness, attach, restore flow, kill), not that Firecracker
boots: no guest runs here."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from sanbox.host.drivers import VmSpec
from sanbox.host.drivers.firecracker.driver import FirecrackerHypervisor
from sanbox.host.drivers.firecracker.vm import RECORD, memory_of

pytestmark = pytest.mark.unit

STAND_IN = """
import http.server, json, socketserver, sys
args = sys.argv[1:]
opts = dict(zip(args[::2], args[1::2]))
state = {"state": "Not started"}
if "--config-file" in opts:
    config = json.load(open(opts["--config-file"]))
    print("booting", config["boot-source"]["kernel_image_path"], flush=True)
    state["state"] = "Running"
json.dump(args, open(sys.argv[0] + ".argv", "w"))

class Api(http.server.BaseHTTPRequestHandler):
    def address_string(self):
        return "api"
    def log_message(self, *a):
        pass
    def answer(self, code, doc=None):
        data = b"" if doc is None else json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.answer(200, {"id": opts["--id"], "state": state["state"],
                          "vmm_version": "stand-in", "app_name": "Firecracker"})
    def do_PUT(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/snapshot/load" and state["state"] == "Not started":
            open(body["snapshot_path"]).read()
            open(body["mem_backend"]["backend_path"]).read()
            state["state"] = "Running" if body["resume_vm"] else "Paused"
            return self.answer(204)
        self.answer(400, {"fault_message": "not here"})

class Server(socketserver.UnixStreamServer):
    def get_request(self):
        request, _ = super().get_request()
        return request, ["api", 0]

Server(opts["--api-sock"], Api).serve_forever()
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    program = tmp_path / "bin" / "firecracker"
    program.parent.mkdir()
    program.write_text(f"#!{sys.executable}\n{STAND_IN}")
    program.chmod(0o755)
    return program


def a_spec(tmp_path: Path, **changes: object) -> VmSpec:
    for name in ("vmlinux", "initrd"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "disk.raw").write_bytes(b"\0" * 4096)
    fields: dict[str, object] = {
        "name": "c1",
        "kernel": tmp_path / "vmlinux",
        "initrd": tmp_path / "initrd",
        "disk": tmp_path / "disk.raw",
        "run_dir": tmp_path / "run",
        "console_log": tmp_path / "logs" / "console.log",
    }
    fields.update(changes)
    return VmSpec(**fields)  # type: ignore[arg-type]


def test_boot_attach_and_kill(tmp_path: Path, stand_in: Path) -> None:
    spec = a_spec(tmp_path)
    hv = FirecrackerHypervisor(stand_in)

    async def scenario() -> None:
        vm = await hv.boot(spec)
        try:
            assert await vm.state() == "Running"
            assert (spec.run_dir / "vm.pid").read_text() == f"{vm.pid}\n"
            again = hv.attach(spec.run_dir)  # a new caller, by the run dir
            assert again is not None and again.pid == vm.pid
            assert await again.frozen() is False
        finally:
            await vm.kill(timeout=5.0)
        assert not vm.alive()
        assert hv.attach(spec.run_dir) is None

    asyncio.run(scenario())
    argv = json.loads(Path(f"{stand_in}.argv").read_text())
    assert argv == [
        "--id",
        "sanbox-c1",
        "--api-sock",
        str(spec.run_dir / "firecracker.sock"),
        "--config-file",
        str(spec.run_dir / "firecracker.json"),
    ]
    assert spec.console_log.read_text() == f"booting {spec.kernel}\n"  # stdout: the console
    record = json.loads((spec.run_dir / RECORD).read_text())
    assert record["vm_id"] == "sanbox-c1" and record["jail"] is None


def test_a_restore_waits_for_its_snapshot(tmp_path: Path, stand_in: Path) -> None:
    saved = tmp_path / "vmstate"
    saved.write_bytes(b"state")
    memory_of(saved).write_bytes(b"memory")
    spec = a_spec(tmp_path, restore=True, memory_file=memory_of(saved), memory_private=True)

    async def scenario() -> None:
        vm = await FirecrackerHypervisor(stand_in).boot(spec)
        try:
            assert await vm.state() == "Not started"
            await vm.load_state(saved)
            assert await vm.state() == "Running"
        finally:
            await vm.kill(timeout=5.0)

    asyncio.run(scenario())
    argv = json.loads(Path(f"{stand_in}.argv").read_text())
    assert "--config-file" not in argv  # only the snapshot configures it
    assert not (spec.run_dir / "firecracker.json").exists()

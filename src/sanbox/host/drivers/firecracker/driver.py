"""The Firecracker driver (`Hypervisor`): boots a VmSpec as a detached Firecracker process, through
Firecracker's jailer (chroot, network namespace, cgroup, the VM user) or directly (the caller's
user, for development), and re-attaches by the run dir. KVM only: Firecracker has no emulation.

A launcher shell starts the process in the background and exits, as QEMU's does, so the VM is
nobody's child; its pid goes to `vm.pid` and `firecracker.vm` (vm.py's record)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import signal
from pathlib import Path

from ..confine import launcher_script
from ..process import process_running
from ._contract import Capabilities, Driver, Liveness, VmHandle, VmmError, VmSpec, VmStartError
from .config import FirecrackerPaths, check_disk, check_spec, vm_config
from .errors import FirecrackerConfigError
from .jail import JailerSettings, jail_root, jailed_paths, jailer_argv, on_host, populate, vm_id
from .probe import binary_version
from .vm import ISOLATION, RECORD, FirecrackerVm, VmRecord, liveness

START_TIMEOUT = 30.0
# Firecracker's own memory beyond guest RAM, as admission estimates it (its documentation
# states under 5 MiB per microVM; the jailer's and the API thread's buffers on top)
FIRECRACKER_OWN_MIB = 16


def capabilities() -> Capabilities:
    """What a Firecracker VM can do."""
    return Capabilities(
        disk_formats=("raw",),
        live_disk_switch=False,
        live_memory_save=False,
        maps_read_only=False,  # a shared memory image is linked in, never handed read-only
        snapshot_format="firecracker",  # a state file + a raw memory file beside it
        confinement="jailer",
        seccomp="firecracker's default filters (per thread)",
        disk_errors="passed to the guest",
        disk_rate="Firecracker's drive rate limiter (token buckets, no peak rate)",
        memory_overhead_mib=0,
        hypervisor_memory_mib=FIRECRACKER_OWN_MIB,
        agent_channel="vsock",  # its Unix socket + `CONNECT <port>` (vsock.py)
    )


def launcher_argv(argv: list[str], cgroup_procs: tuple[Path, ...], spec: VmSpec) -> list[str]:
    """`confine.launcher_script` starting Firecracker's `argv` (the guest's serial console is
    its stdout: the console log; its stderr: the hypervisor log). Pure."""
    out, err = shlex.quote(str(spec.console_log)), shlex.quote(str(spec.hypervisor_log))
    script = launcher_script(cgroup_procs, f">>{out} 2>{err}")
    return ["sh", "-c", script, "sanbox-launch", *argv]


def direct_argv(spec: VmSpec, firecracker: Path, paths: FirecrackerPaths) -> list[str]:
    """Firecracker without the jailer (in the VM's network namespace, if any). Pure."""
    argv = [str(firecracker), "--id", vm_id(spec), "--api-sock", str(paths.api_socket)]
    if not spec.restore:
        argv += ["--config-file", str(paths.config)]
    if spec.net is not None and spec.net.netns:
        argv = ["ip", "netns", "exec", spec.net.netns, *argv]
    return argv


def _said(*logs: Path) -> str:
    words: list[str] = []
    for log in logs:
        with contextlib.suppress(OSError):
            words += [line.strip() for line in log.read_text(errors="replace").splitlines()]
    return " | ".join(w for w in words if w)[-2000:]


class FirecrackerHypervisor:
    name = "firecracker"
    accel = "kvm"
    run_files: tuple[str, ...] = ("agent.sock", "firecracker.sock", "vm.pid", RECORD)

    def __init__(self, firecracker: Path, jailer: JailerSettings | None = None) -> None:
        self.firecracker = firecracker
        self.jailer = jailer

    @property
    def isolation(self) -> str:
        return ISOLATION

    @property
    def build(self) -> str:
        version, reason = binary_version(str(self.firecracker))
        return version or f"unknown ({reason})"

    @property
    def capabilities(self) -> Capabilities:
        return capabilities()

    @property
    def tools(self) -> dict[str, str]:
        return {"firecracker": "none in Debian: Firecracker's release binaries"}

    def is_vm_process(self, cmdline: str) -> bool:
        return "firecracker" in cmdline

    def _prepare(self, spec: VmSpec) -> tuple[list[str], VmRecord, tuple[Path, ...]]:
        """The argv, the record (pid 0 until launched) and the cgroups the launcher joins."""
        check_spec(spec)
        check_disk(spec.disk)
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        spec.console_log.parent.mkdir(parents=True, exist_ok=True)
        for stale in self.run_files:
            (spec.run_dir / stale).unlink(missing_ok=True)
        vmid = vm_id(spec)
        tap = spec.net.tap if spec.net is not None else None
        memory = str(spec.memory_file) if spec.memory_file is not None else None
        if self.jailer is None:
            if spec.run_as is not None:
                raise FirecrackerConfigError("an unprivileged VM user needs the jailer")
            paths = FirecrackerPaths.direct(spec)
            if not spec.restore:
                paths.config.write_text(json.dumps(vm_config(spec, paths)))
            record = VmRecord(
                0, vmid, str(paths.api_socket), str(paths.vsock), str(spec.disk), memory, tap
            )
            return direct_argv(spec, self.firecracker, paths), record, spec.cgroup_procs
        if spec.run_as is None:
            raise FirecrackerConfigError("the jailer needs the VM user (spec.run_as)")
        root = jail_root(self.jailer, vmid)
        if root.parent.is_dir():  # a jail left by an earlier run of this VM
            shutil.rmtree(root.parent)
        inside = jailed_paths()
        config = None if spec.restore else json.dumps(vm_config(spec, inside)).encode()
        populate(spec, root, spec.run_as, config)
        vsock = on_host(root, inside.vsock)
        spec.agent_socket.symlink_to(vsock)
        api_socket = str(on_host(root, inside.api_socket))
        owner = (spec.run_as.uid, spec.run_as.gid)
        record = VmRecord(
            0, vmid, api_socket, str(vsock), str(spec.disk), memory, tap, str(root), owner
        )
        return jailer_argv(spec, self.jailer, spec.run_as), record, ()

    async def boot(self, spec: VmSpec) -> FirecrackerVm:
        argv, record, cgroups = await asyncio.to_thread(self._prepare, spec)
        proc = await asyncio.create_subprocess_exec(
            *launcher_argv(argv, cgroups, spec),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        out, err = await proc.communicate()
        if proc.returncode != 0:
            words = err.decode(errors="replace").strip()
            raise VmStartError(f"Firecracker could not be launched: {words or proc.returncode}")
        pid = int(out.split()[-1])
        record = dataclasses.replace(record, pid=pid)
        (spec.run_dir / "vm.pid").write_text(f"{pid}\n")
        (spec.run_dir / RECORD).write_text(record.dumps())
        vm = FirecrackerVm(record, spec.run_dir)
        await _wait_started(vm, spec, "Not started" if spec.restore else "Running")
        return vm

    def attach(self, run_dir: Path) -> FirecrackerVm | None:
        try:
            record = VmRecord.loads((run_dir / RECORD).read_text())
        except (OSError, ValueError, TypeError):
            return None
        if liveness(record.pid, record.vm_id) is Liveness.DEAD:
            return None
        return FirecrackerVm(record, run_dir)


async def _wait_started(vm: FirecrackerVm, spec: VmSpec, state: str) -> None:
    """Until the API answers with `state` (booted, or waiting for a snapshot), or the process
    exits: then its own words say why. One that does neither in time is killed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_TIMEOUT
    log = Path(vm.record.api_socket).with_name("firecracker.log")
    while loop.time() < deadline:
        if not process_running(
            vm.pid
        ):  # the launcher's child: ip or jailer, then Firecracker, one pid
            raise VmStartError(
                f"Firecracker failed to start: {_said(spec.hypervisor_log, log) or 'no words'}"
            )
        if Path(vm.record.api_socket).exists():
            with contextlib.suppress(VmmError):
                if await vm.state() == state:
                    return
        await asyncio.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(vm.pid, signal.SIGKILL)
    raise VmStartError(f"Firecracker did not start within {START_TIMEOUT:.0f}s: {_said(log)}")


def _conforms(hv: FirecrackerHypervisor, vm: FirecrackerVm) -> tuple[Driver, VmHandle]:
    """Never called: mypy checks here that the driver meets the contract's protocols."""
    return hv, vm

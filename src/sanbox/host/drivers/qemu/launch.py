"""QEMU driver: `-M microvm` with virtio-mmio devices, a virtio-serial control port for the agent,
virtio-rng, and an optional tap. A small launcher detaches QEMU (a shell that joins the VM's
cgroups, starts QEMU in the background and exits), so the VM survives its caller and is nobody's
child; a new caller re-attaches by the run dir (pidfile, QMP socket, agent socket).

QEMU is confined (confine.py): seccomp (`-sandbox`), the VM user instead of root, the computer's
cgroups from its first instruction. A disk error stops the guest (`werror=stop,rerror=stop`)
instead of being handed to it or freezing it unnoticed: `run_state()` then says `io-error`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

from ..confine import open_tap, prepare
from ..driver import Capabilities, VmSpec
from ..errors import VmNotRunningError, VmStartError
from ..process import DetachedVm, pid_alive, process_running
from . import blockops, inplace, state, stream
from .accel import host_mhz, qemu_binary, qemu_version
from .argv import (
    READ_ONLY_MAPPING,
    SANDBOX,
    TCG_CODE_CACHE_MIB,
    TCG_LIVE_SAVE,
    launcher_argv,
    qemu_argv,
    version_of,
)
from .qmp import QmpClient, QmpError

START_TIMEOUT = 30.0
# QEMU's own heap, device emulation and I/O buffers beyond guest RAM, as admission estimates it
# (under TCG its code cache, up to TCG_CODE_CACHE_MIB, comes on top); its cgroup allows more
QEMU_OWN_MIB = 64


def _said(log: Path) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())[-2000:]


async def _wait_started(vm: QemuVm, log: Path) -> None:
    """Until QEMU's monitor answers (its devices are made, the guest starts), or it exits: then
    its own words say why. A QEMU that does neither in time is killed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_TIMEOUT
    while loop.time() < deadline:
        if not process_running(vm.pid):  # the launcher's child: ip, setpriv, then QEMU, one pid
            raise VmStartError(f"QEMU failed to start: {_said(log) or 'no words'}")
        if vm.qmp_socket.exists() and vm.alive():
            with contextlib.suppress(QmpError, VmNotRunningError):
                qmp = await vm.qmp(timeout=1.0)
                try:
                    await qmp.execute("query-status", timeout=5.0)
                    return
                finally:
                    await qmp.close()
        await asyncio.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(vm.pid, signal.SIGKILL)
    raise VmStartError(f"QEMU did not start within {START_TIMEOUT:.0f}s: {_said(log)}")


class QemuVm(DetachedVm):
    """A QEMU process running one computer."""

    @property
    def qmp_socket(self) -> Path:
        return self.run_dir / "qmp.sock"

    async def frozen(self) -> bool | None:
        """Whether the vCPUs are stopped by the host (QMP `stop`, a state save): True, False, or
        None if the monitor could not be asked."""
        return await state.vcpus_stopped(self)

    async def qmp(self, timeout: float = 10.0) -> QmpClient:
        if not self.alive():
            raise VmNotRunningError(f"VM process {self.pid} is gone")
        return await QmpClient.connect(self.qmp_socket, timeout)

    async def disk_error(self) -> str | None:
        """None while the VM runs as it should; `nospace` or `failed` when a disk error stopped
        it (`werror=stop`: QEMU's run state is `io-error`, the disk's io-status says why)."""
        qmp = await self.qmp(timeout=5.0)
        try:
            status = await qmp.execute("query-status", timeout=5.0) or {}
            if status.get("status") != "io-error":
                return None
            blocks = await qmp.execute("query-block", timeout=5.0) or []
        finally:
            await qmp.close()
        io = [b.get("io-status") for b in blocks if b.get("io-status") not in (None, "ok")]
        return "nospace" if "nospace" in io else "failed"

    async def save_state(self, vmstate: Path) -> bool:
        return await state.save_state(self, vmstate)

    async def save_state_in_place(
        self, vmstate: Path, memory_fd: int, into_fd: int | None = None
    ) -> list[tuple[int, int]] | None:
        return await inplace.save_in_place(self, self.pid, vmstate, memory_fd, into_fd)

    async def save_state_live(self, vmstate: Path, at_stop: Callable[[], Awaitable[None]]) -> float:
        return await state.save_state_live(self, vmstate, at_stop)

    def split_saved_state(
        self, saved: Path, vmstate: Path, memory: Path, memory_bytes: int
    ) -> None:
        stream.split(saved, vmstate, memory, memory_bytes)

    async def load_state(self, vmstate: Path) -> None:
        await state.load_state(self, vmstate)

    async def continue_running(self) -> None:
        await state.resume_vcpus(self)

    async def quit(self) -> None:
        await state.quit_vm(self)

    async def pause(self) -> None:
        await blockops.pause(self)

    async def switch_disk(self, overlay: Path) -> None:
        await blockops.switch_disk(self, overlay)

    async def stream_disk(self, base: Path) -> None:
        await blockops.stream_disk(self, base)

    async def grow_disk(self, size_bytes: int) -> None:
        await blockops.grow_disk(self, size_bytes)


class QemuHypervisor:
    name = "qemu"
    run_files: tuple[str, ...] = ("agent.sock", "qmp.sock", "vm.pid")
    isolations = ("qemu-kvm", "qemu-tcg")  # what `isolation` can be

    def __init__(self, accel: str) -> None:
        self.accel = accel

    @property
    def isolation(self) -> str:
        return f"qemu-{self.accel}"

    @property
    def build(self) -> str:
        return qemu_version()

    @property
    def capabilities(self) -> Capabilities:
        version = version_of(qemu_version())
        return Capabilities(
            disk_formats=("qcow2", "raw"),
            live_disk_switch=True,  # blockdev-snapshot, block-stream, block_resize
            # pre-copy migration, pause-before-switchover; under TCG only where QEMU keeps
            # every page a vCPU writes dirty (otherwise a memory snapshot stops the vCPUs)
            live_memory_save=self.accel == "kvm" or version >= TCG_LIVE_SAVE,
            # QEMU >= 8.2 maps a memory image copy-on-write from a file it opens read-only
            maps_read_only=version >= READ_ONLY_MAPPING,
            snapshot_format="qemu-migration",
            confinement="seccomp+uid+cgroups",
            seccomp=SANDBOX,
            disk_errors="stop the guest (werror=stop,rerror=stop); the computer goes to error",
            disk_rate="QEMU's drive throttling (reads and writes; not flushes or discards)",
            # TCG's translated code cache, beyond guest RAM and QEMU's own base
            memory_overhead_mib=TCG_CODE_CACHE_MIB if self.accel == "tcg" else 0,
            hypervisor_memory_mib=QEMU_OWN_MIB + (TCG_CODE_CACHE_MIB if self.accel == "tcg" else 0),
            agent_channel="virtio-serial",
        )

    @property
    def tools(self) -> dict[str, str]:
        return {"qemu-system-x86_64": "qemu-system-x86"}

    def is_vm_process(self, cmdline: str) -> bool:
        return "qemu-system" in cmdline

    async def boot(self, spec: VmSpec) -> QemuVm:
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        spec.console_log.parent.mkdir(parents=True, exist_ok=True)
        for stale in self.run_files:
            (spec.run_dir / stale).unlink(missing_ok=True)
        tap_fd = None
        if spec.run_as is not None:
            await asyncio.to_thread(prepare, spec, spec.run_as)
            if spec.net is not None and spec.net.netns:
                tap_fd = await asyncio.to_thread(open_tap, spec.net.netns, spec.net.tap)
        try:
            argv = qemu_argv(spec, self.accel, host_mhz(), qemu_binary(), tap_fd)
            proc = await asyncio.create_subprocess_exec(
                *launcher_argv(argv, spec.cgroup_procs, spec.hypervisor_log),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                pass_fds=() if tap_fd is None else (tap_fd,),
            )
            out, err = await proc.communicate()  # the shell only starts QEMU: it returns at once
        finally:
            if tap_fd is not None:
                os.close(tap_fd)
        if proc.returncode != 0:
            words = err.decode(errors="replace").strip()
            raise VmStartError(f"QEMU could not be launched: {words or f'exit {proc.returncode}'}")
        vm = QemuVm(int(out.split()[-1]), spec.run_dir, self.isolation)
        await _wait_started(vm, spec.hypervisor_log)
        return vm

    def attach(self, run_dir: Path) -> QemuVm | None:
        try:
            pid = int((run_dir / "vm.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        if not pid_alive(pid, run_dir):
            return None
        return QemuVm(pid, run_dir, self.isolation)

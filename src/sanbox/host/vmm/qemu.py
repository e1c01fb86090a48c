"""QEMU driver: `-M microvm` with virtio-mmio devices, a virtio-serial control port for the agent,
virtio-rng, and an optional tap. QEMU daemonizes itself, so the VM survives its caller; a new caller
re-attaches by the run dir (pidfile, QMP socket, agent socket)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

from ..disk.qcow2 import format_of
from .accel import host_mhz, qemu_binary
from .errors import VmNotRunningError, VmStartError
from .hypervisor import VmSpec
from .qmp import QmpClient

AGENT_PORT_NAME = "org.sanbox.agent"
START_TIMEOUT = 30.0


def kernel_cmdline(spec: VmSpec, accel: str, mhz: float) -> str:
    args = [
        "console=ttyS0", "quiet", "panic=-1", "reboot=t", "root=/dev/vda", "rootfstype=ext4",
        "rw", "init=/sbin/sanbox-init", "ipv6.disable=1", f"sanbox.hostname={spec.hostname}",
    ]  # fmt: skip
    if accel == "tcg":
        # microvm has no HPET/PM timer: under TCG PIT calibration can hang early boot
        args.append(f"tsc_early_khz={int(mhz * 1000)}")
    if spec.net is not None:
        args += [f"sanbox.ip={spec.net.guest_cidr}", f"sanbox.gw={spec.net.gateway}"]
        if spec.net.dns:
            args.append(f"sanbox.dns={spec.net.dns}")
    args += list(spec.extra_cmdline)
    return " ".join(args)


def qemu_argv(
    spec: VmSpec, accel: str, mhz: float, binary: str = "qemu-system-x86_64"
) -> list[str]:
    """The full command line for a spec. Pure: unit-tested."""
    cpu = "host" if accel == "kvm" else "max"
    run = spec.run_dir
    argv = [
        binary, "-name", f"sanbox-{spec.name}", "-accel", accel, "-cpu", cpu,
        "-M", "microvm,rtc=on", "-m", str(spec.memory_mib), "-smp", str(spec.vcpus),
        "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
        "-chardev", f"file,id=console,path={spec.console_log},append=on",
        "-serial", "chardev:console",
        "-kernel", str(spec.kernel), "-initrd", str(spec.initrd),
        "-append", kernel_cmdline(spec, accel, mhz),
        "-drive", f"id=root,file={spec.disk},format={format_of(spec.disk)},if=none,"
                  "cache=writeback,discard=unmap",
        "-device", "virtio-blk-device,drive=root",
        "-device", "virtio-serial-device",
        "-chardev", f"socket,id=agent,path={run / 'agent.sock'},server=on,wait=off",
        "-device", f"virtserialport,chardev=agent,name={AGENT_PORT_NAME}",
        "-device", "virtio-rng-device",
        "-qmp", f"unix:{run / 'qmp.sock'},server=on,wait=off",
        "-pidfile", str(run / "vm.pid"), "-daemonize",
    ]  # fmt: skip
    if spec.net is not None:
        argv += [
            "-netdev", f"tap,id=net0,ifname={spec.net.tap},script=no,downscript=no",
            "-device", f"virtio-net-device,netdev=net0,mac={spec.net.mac}",
        ]  # fmt: skip
    if spec.memory_file is not None:
        argv[argv.index("-M") + 1] += ",memory-backend=ram"
        argv += [
            "-object",
            f"memory-backend-file,id=ram,size={spec.memory_mib}M,mem-path={spec.memory_file},"
            "share=on",
        ]
    if spec.restore:
        argv += ["-incoming", "defer"]
    if spec.net is not None and spec.net.netns:
        argv = ["ip", "netns", "exec", spec.net.netns, *argv]
    return argv


def _pid_alive(pid: int, run_dir: Path) -> bool:
    """True if `pid` is a live QEMU process of this run dir (guards against pid reuse)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and str(run_dir).encode() in cmdline


class QemuVm:
    """A QEMU process running one computer."""

    def __init__(self, pid: int, run_dir: Path, isolation: str) -> None:
        self.pid = pid
        self.run_dir = run_dir
        self.isolation = isolation

    @property
    def agent_socket(self) -> Path:
        return self.run_dir / "agent.sock"

    @property
    def qmp_socket(self) -> Path:
        return self.run_dir / "qmp.sock"

    def alive(self) -> bool:
        return _pid_alive(self.pid, self.run_dir)

    async def qmp(self, timeout: float = 10.0) -> QmpClient:
        if not self.alive():
            raise VmNotRunningError(f"VM process {self.pid} is gone")
        return await QmpClient.connect(self.qmp_socket, timeout)

    async def wait_exit(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.alive():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def kill(self, timeout: float = 5.0) -> None:
        """SIGTERM (QEMU exits at once), then SIGKILL if it is still there after `timeout`."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            if not self.alive():
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
            if await self.wait_exit(wait):
                return
        raise VmNotRunningError(f"VM process {self.pid} did not die after SIGKILL")

    async def save_state(self, vmstate: Path) -> None:
        from .qemu_state import save_state

        await save_state(self, vmstate)

    async def load_state(self, vmstate: Path) -> None:
        from .qemu_state import load_state

        await load_state(self, vmstate)

    async def continue_running(self) -> None:
        from .qemu_state import resume_vcpus

        await resume_vcpus(self)

    async def quit(self) -> None:
        from .qemu_state import quit_vm

        await quit_vm(self)


class QemuHypervisor:
    name = "qemu"

    def __init__(self, accel: str) -> None:
        self.accel = accel

    @property
    def isolation(self) -> str:
        return f"qemu-{self.accel}"

    async def boot(self, spec: VmSpec) -> QemuVm:
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        spec.console_log.parent.mkdir(parents=True, exist_ok=True)
        for stale in ("agent.sock", "qmp.sock", "vm.pid"):
            (spec.run_dir / stale).unlink(missing_ok=True)
        argv = qemu_argv(spec, self.accel, host_mhz(), qemu_binary())
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(START_TIMEOUT):
                out, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise VmStartError(f"QEMU did not daemonize within {START_TIMEOUT:.0f}s") from None
        if proc.returncode != 0:
            words = (err or out).decode(errors="replace").strip()
            raise VmStartError(f"QEMU failed to start: {words or f'exit {proc.returncode}'}")
        vm = self.attach(spec.run_dir)
        if vm is None:
            raise VmStartError("QEMU started but left no live process behind its pidfile")
        return vm

    def attach(self, run_dir: Path) -> QemuVm | None:
        try:
            pid = int((run_dir / "vm.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        if not _pid_alive(pid, run_dir):
            return None
        return QemuVm(pid, run_dir, self.isolation)

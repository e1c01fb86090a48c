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
import errno
import os
import re
import shlex
import signal
from collections.abc import Callable
from pathlib import Path

from ..disk.qcow2 import format_of
from .accel import host_mhz, qemu_binary, qemu_version
from .confine import SANDBOX, open_tap, prepare, setpriv_argv
from .errors import QmpError, VmmError, VmNotRunningError, VmStartError
from .hypervisor import Liveness, VmSpec
from .qmp import QmpClient

AGENT_PORT_NAME = "org.sanbox.agent"
START_TIMEOUT = 30.0


TCG_CODE_CACHE_MIB = 256  # TCG's translated code; QEMU 7.2's default is 1 GiB, grown as touched


def accel_option(accel: str) -> str:
    """`-accel`'s value: under TCG with a bounded translation cache, so QEMU's memory is bounded
    (and fits its cgroup's `memory.max`)."""
    return f"tcg,tb-size={TCG_CODE_CACHE_MIB}" if accel == "tcg" else accel


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
    spec: VmSpec,
    accel: str,
    mhz: float,
    binary: str = "qemu-system-x86_64",
    tap_fd: int | None = None,
) -> list[str]:
    """The full command line for a spec (the tap by name, or as an inherited descriptor for an
    unprivileged QEMU). Pure: unit-tested."""
    cpu = "host" if accel == "kvm" else "max"
    run = spec.run_dir
    argv = [
        binary, "-name", f"sanbox-{spec.name}", "-accel", accel_option(accel), "-cpu", cpu,
        "-M", "microvm,rtc=on", "-m", str(spec.memory_mib), "-smp", str(spec.vcpus),
        "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
        "-chardev", f"file,id=console,path={spec.console_log},append=on",
        "-serial", "chardev:console",
        "-kernel", str(spec.kernel), "-initrd", str(spec.initrd),
        "-append", kernel_cmdline(spec, accel, mhz),
        "-sandbox", SANDBOX,
        "-drive", f"id=root,file={spec.disk},format={format_of(spec.disk)},if=none,"
                  "cache=writeback,discard=unmap,werror=stop,rerror=stop",
        "-device", "virtio-blk-device,drive=root",
        "-device", "virtio-serial-device",
        "-chardev", f"socket,id=agent,path={run / 'agent.sock'},server=on,wait=off",
        "-device", f"virtserialport,chardev=agent,name={AGENT_PORT_NAME}",
        "-device", "virtio-rng-device",
        "-qmp", f"unix:{run / 'qmp.sock'},server=on,wait=off",
        "-pidfile", str(run / "vm.pid"),
    ]  # fmt: skip
    if spec.net is not None:
        argv += [
            "-netdev", f"tap,id=net0,fd={tap_fd}" if tap_fd is not None
                       else f"tap,id=net0,ifname={spec.net.tap},script=no,downscript=no",
            "-device", f"virtio-net-device,netdev=net0,mac={spec.net.mac}",
        ]  # fmt: skip
    if spec.memory_file is not None:
        argv[argv.index("-M") + 1] += ",memory-backend=ram"
        argv += ["-object", memory_backend(spec)]
    if spec.restore:
        argv += ["-incoming", "defer"]
    if spec.run_as is not None:
        argv = [*setpriv_argv(spec.run_as), *argv]
    if spec.net is not None and spec.net.netns:
        argv = ["ip", "netns", "exec", spec.net.netns, *argv]
    return argv


def memory_backend(spec: VmSpec) -> str:
    """The guest RAM's backend: a shared tmpfs file that `x-ignore-shared` leaves out of the
    migration stream; or saved memory mapped copy-on-write (`share=off`), its clean pages read
    from the page cache: the VM's own file (a resume), or a memory image many VMs map, which QEMU
    opens read-only (`readonly=on,rom=off`, QEMU >= 8.2: `rom=off` keeps it writable RAM to the
    guest). QEMU 7.2 has no `rom`: its `readonly=on` makes the guest's RAM a ROM, and without it
    QEMU opens the file read-write, so there a shared image is never handed to QEMU (it is
    copied into the VM's own RAM file: snapshot/restore.py). Pure."""
    assert spec.memory_file is not None
    if spec.memory_readonly:
        mode = "share=off,readonly=on,rom=off"
    else:
        mode = f"share={'off' if spec.memory_private else 'on'}"
    return f"memory-backend-file,id=ram,size={spec.memory_mib}M,mem-path={spec.memory_file},{mode}"


READ_ONLY_MAPPING = (8, 2)  # QEMU's memory-backend-file `rom=` property came in 8.2


def version_of(banner: str) -> tuple[int, int]:
    """(major, minor) from `qemu-system-x86_64 --version`'s first line; (0, 0) if unreadable."""
    match = re.search(r"version (\d+)\.(\d+)", banner)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def launcher_argv(argv: list[str], cgroup_procs: tuple[Path, ...], log: Path) -> list[str]:
    """A shell that joins the cgroups (so QEMU and all it allocates are in them from the start),
    starts `argv` in the background with its output in `log`, prints its pid and exits. Pure."""
    joins = "".join(f"echo $$ > {shlex.quote(str(f))} || exit 1\n" for f in cgroup_procs)
    script = f'cd / || exit 1\n{joins}"$@" </dev/null >{shlex.quote(str(log))} 2>&1 &\necho $!\n'
    return ["sh", "-c", script, "sanbox-launch", *argv]


# the errors that mean "no such process": anything else is a failure to look
_GONE = frozenset({errno.ENOENT, errno.ESRCH})


def _read_proc(pid: int) -> tuple[bytes, str]:
    """`/proc/PID`'s command line and run state (a letter: R, S, T, Z, ...)."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read()
    with open(f"/proc/{pid}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    return cmdline, state


def liveness(
    pid: int, run_dir: Path, read: Callable[[int], tuple[bytes, str]] = _read_proc
) -> Liveness:
    """Whether `pid` is a live QEMU process of this run dir (the command line guards against pid
    reuse). A process that is gone, a zombie or another program is DEAD; a look that failed for
    another reason (EMFILE, ENFILE, EAGAIN, EPERM, ...) is UNKNOWN."""
    try:
        cmdline, state = read(pid)
    except OSError as exc:
        return Liveness.DEAD if exc.errno in _GONE else Liveness.UNKNOWN
    except IndexError:  # a stat line cut short: the process is going
        return Liveness.DEAD
    if state == "Z" or str(run_dir).encode() not in cmdline:
        return Liveness.DEAD
    return Liveness.ALIVE


def _pid_alive(pid: int, run_dir: Path) -> bool:
    """False only if `pid` is known not to be this run dir's live QEMU (an unknown is alive)."""
    return liveness(pid, run_dir) is not Liveness.DEAD


def _said(log: Path) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())[-2000:]


def _running(pid: int) -> bool:
    """`pid` exists and is not a zombie (its cmdline may read empty while it execs)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


async def _wait_started(vm: QemuVm, log: Path) -> None:
    """Until QEMU's monitor answers (its devices are made, the guest starts), or it exits: then
    its own words say why. A QEMU that does neither in time is killed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_TIMEOUT
    while loop.time() < deadline:
        if not _running(vm.pid):  # the launcher's child: ip, setpriv, then QEMU, one pid
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

    def liveness(self) -> Liveness:
        return liveness(self.pid, self.run_dir)

    def alive(self) -> bool:
        """False only when the process is known to be gone: a failed look is not a death."""
        return self.liveness() is not Liveness.DEAD

    async def frozen(self) -> bool | None:
        """Whether the vCPUs are stopped by the host (QMP `stop`, a state save): True, False, or
        None if the monitor could not be asked."""
        from .qemu_state import vcpus_stopped

        return await vcpus_stopped(self)

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
            state = self.liveness()
            if state is Liveness.DEAD:
                return
            if state is Liveness.UNKNOWN:  # never signal a pid not known to be this VM's
                raise VmmError(f"VM process {self.pid} could not be checked: not killed")
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
            if await self.wait_exit(wait):
                return
        raise VmNotRunningError(f"VM process {self.pid} did not die after SIGKILL")

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
        from .qemu_state import save_state

        return await save_state(self, vmstate)

    async def load_state(self, vmstate: Path) -> None:
        from .qemu_state import load_state

        await load_state(self, vmstate)

    async def continue_running(self) -> None:
        from .qemu_state import resume_vcpus

        await resume_vcpus(self)

    async def quit(self) -> None:
        from .qemu_state import quit_vm

        await quit_vm(self)

    async def pause(self) -> None:
        from .qemu_snapshot import pause

        await pause(self)

    async def switch_disk(self, overlay: Path) -> None:
        from .qemu_snapshot import switch_disk

        await switch_disk(self, overlay)

    async def stream_disk(self, base: Path) -> None:
        from .qemu_snapshot import stream_disk

        await stream_disk(self, base)

    async def grow_disk(self, size_bytes: int) -> None:
        from .qemu_snapshot import grow_disk

        await grow_disk(self, size_bytes)


class QemuHypervisor:
    name = "qemu"

    def __init__(self, accel: str) -> None:
        self.accel = accel

    @property
    def isolation(self) -> str:
        return f"qemu-{self.accel}"

    @property
    def memory_overhead_mib(self) -> int:
        """Memory the hypervisor holds beyond guest RAM and its own base: TCG's code cache."""
        return TCG_CODE_CACHE_MIB if self.accel == "tcg" else 0

    @property
    def maps_read_only(self) -> bool:
        """QEMU >= 8.2 maps a memory image copy-on-write from a file it opens read-only."""
        return version_of(qemu_version()) >= READ_ONLY_MAPPING

    async def boot(self, spec: VmSpec) -> QemuVm:
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        spec.console_log.parent.mkdir(parents=True, exist_ok=True)
        for stale in ("agent.sock", "qmp.sock", "vm.pid"):
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
        if not _pid_alive(pid, run_dir):
            return None
        return QemuVm(pid, run_dir, self.isolation)

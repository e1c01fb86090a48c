"""QEMU's command line, pure and unit-tested: `-M microvm` with virtio-mmio devices, a
virtio-serial control port for the agent, virtio-rng, an optional tap, the guest RAM's backend, the
seccomp sandbox (`SANDBOX`: every optional group denied; `spawn=deny` forbids fork and exec, so no
`exec:` migration (state.py) and no `-daemonize`; `elevateprivileges=deny` forbids set*uid, so the
launcher drops to the VM user with `setpriv` before QEMU starts), the root drive's I/O throttle
(`throttling`), and the launcher shell."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from ...disk.qcow2 import format_of
from ...disk_rate import BURST_SECONDS, DiskRate
from ..confine import launcher_script, setpriv_argv
from ..driver import VmSpec

SANDBOX = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
AGENT_PORT_NAME = "org.sanbox.agent"


TCG_CODE_CACHE_MIB = 256  # TCG's translated code; QEMU 7.2's default is 1 GiB, grown as touched


def accel_option(accel: str) -> str:
    """`-accel`'s value: under TCG with a bounded translation cache, so QEMU's memory is bounded
    (and fits its cgroup's `memory.max`)."""
    return f"tcg,tb-size={TCG_CODE_CACHE_MIB}" if accel == "tcg" else accel


def throttling(rate: DiskRate) -> str:
    """The root drive's I/O throttle (QEMU's `throttling.*` drive options, its throttle group
    on the drive's BlockBackend, kept across `blockdev-snapshot`): reads and writes together,
    bytes and requests, each with a burst (`-max` for `-max-length` seconds). QEMU counts the
    guest's reads and writes only, not its flushes or discards. Empty when unbounded. Pure."""
    options = []
    for name, sustained, burst in (
        ("bps-total", rate.bps, rate.burst_bps),
        ("iops-total", rate.iops, rate.burst_iops),
    ):
        if sustained:
            options += [
                f"throttling.{name}={sustained}",
                f"throttling.{name}-max={burst}",
                f"throttling.{name}-max-length={BURST_SECONDS}",
            ]
    return "".join(f",{o}" for o in options)


def kernel_cmdline(spec: VmSpec, accel: str, mhz: float) -> str:
    args = [
        "console=ttyS0",
        "quiet",
        "panic=-1",
        "reboot=t",
        "root=/dev/vda",
        "rootfstype=ext4",
        "rw",
        "init=/sbin/sanbox-init",
        "ipv6.disable=1",
        f"sanbox.hostname={spec.hostname}",
    ]
    if accel == "tcg":
        # microvm has no HPET/PM timer: under TCG PIT calibration can hang early boot
        args.append(f"tsc_early_khz={int(mhz * 1000)}")
        # TCG's TSC follows the host's clock and is steady, but the clocksource watchdog checks
        # it against jiffies, whose ticks TCG delivers late under load: on some boots it marked
        # the TSC unstable and the guest fell back to refined-jiffies, a 4 ms clock (its timers,
        # sleeps and every time taken inside it at that resolution)
        args.append("tsc=reliable")
        if not spec.tcg_aslr:  # HostSettings' SANBOX_TCG_ASLR: speed for the guests' defences
            args.append("norandmaps")
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
        binary,
        "-name",
        f"sanbox-{spec.name}",
        "-accel",
        accel_option(accel),
        "-cpu",
        cpu,
        "-M",
        "microvm,rtc=on",
        "-m",
        str(spec.memory_mib),
        "-smp",
        str(spec.vcpus),
        "-nodefaults",
        "-no-user-config",
        "-nographic",
        "-no-reboot",
        "-chardev",
        f"file,id=console,path={spec.console_log},append=on",
        "-serial",
        "chardev:console",
        "-kernel",
        str(spec.kernel),
        "-initrd",
        str(spec.initrd),
        "-append",
        kernel_cmdline(spec, accel, mhz),
        "-sandbox",
        SANDBOX,
        "-drive",
        f"id=root,file={spec.disk},format={format_of(spec.disk)},if=none,"
        "cache=writeback,discard=unmap,werror=stop,rerror=stop" + throttling(spec.disk_rate),
        "-device",
        "virtio-blk-device,drive=root",
        "-device",
        "virtio-serial-device",
        "-chardev",
        f"socket,id=agent,path={run / 'agent.sock'},server=on,wait=off",
        "-device",
        f"virtserialport,chardev=agent,name={AGENT_PORT_NAME}",
        "-device",
        "virtio-rng-device",
        "-qmp",
        f"unix:{run / 'qmp.sock'},server=on,wait=off",
        "-pidfile",
        str(run / "vm.pid"),
    ]
    if spec.net is not None:
        argv += [
            "-netdev",
            f"tap,id=net0,fd={tap_fd}"
            if tap_fd is not None
            else f"tap,id=net0,ifname={spec.net.tap},script=no,downscript=no",
            "-device",
            f"virtio-net-device,netdev=net0,mac={spec.net.mac}",
        ]
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
    copied into the VM's own RAM file: host/machines/restore.py). Pure."""
    assert spec.memory_file is not None
    if spec.memory_readonly:
        mode = "share=off,readonly=on,rom=off"
    else:
        mode = f"share={'off' if spec.memory_private else 'on'}"
    return f"memory-backend-file,id=ram,size={spec.memory_mib}M,mem-path={spec.memory_file},{mode}"


READ_ONLY_MAPPING = (8, 2)  # QEMU's memory-backend-file `rom=` property came in 8.2
# Before 9.0, TCG loses guest writes during a pre-copy save: syncing the dirty bitmap did not
# reset the vCPUs' TLB entries, so a page written through one stayed clean and its last copy in
# the stream was stale (QEMU commit "physmem: Fix migration dirty bitmap coherency with TCG
# memory access"; here, restored guests' kernels panicked). KVM tracks dirty pages itself.
TCG_LIVE_SAVE = (9, 0)


def version_of(banner: str) -> tuple[int, int]:
    """(major, minor) from `qemu-system-x86_64 --version`'s first line; (0, 0) if unreadable."""
    match = re.search(r"version (\d+)\.(\d+)", banner)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def launcher_argv(argv: list[str], cgroup_procs: tuple[Path, ...], log: Path) -> list[str]:
    """`confine.launcher_script` starting QEMU's `argv`, its output in `log`. Pure."""
    script = launcher_script(cgroup_procs, f">{shlex.quote(str(log))} 2>&1")
    return ["sh", "-c", script, "sanbox-launch", *argv]

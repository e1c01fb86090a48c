"""Firecracker's VM configuration for a VmSpec: the `--config-file` JSON (the same sections as the
API's `FullVmConfiguration`: boot-source, drives, machine-config, network-interfaces, vsock,
logger, metrics, entropy) and the guest kernel's command line. Pure: unit-tested, and every
section is checked against Firecracker's published API spec (tests/unit/test_firecracker_spec.py).
The root drive carries the computer's disk I/O bound as its `rate_limiter` (`rate_limiter`).

Firecracker sees paths as it opens them: the host's own paths when it runs directly, paths inside
its chroot when the jailer starts it (jail.py). `FirecrackerPaths` says which."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...disk_rate import BURST_SECONDS, DiskRate
from ._contract import VmSpec
from .errors import FirecrackerConfigError

GUEST_CID = 3  # the guest's vsock address; each VM has its own vsock device, so one CID serves all
AGENT_VSOCK_PORT = 1024  # the port the guest agent listens on (`sanbox-agent --vsock 1024`)
MAX_VCPUS = 32  # MachineConfiguration.vcpu_count's maximum
QCOW2_MAGIC = b"QFI\xfb"


@dataclass(frozen=True)
class FirecrackerPaths:
    """Every path in the configuration, as the Firecracker process opens it."""

    kernel: Path
    initrd: Path
    disk: Path
    api_socket: Path
    vsock: Path  # the vsock's Unix socket: the host's end of the agent channel
    log: Path
    metrics: Path
    config: Path

    @classmethod
    def direct(cls, spec: VmSpec) -> FirecrackerPaths:
        """Firecracker started without the jailer: the spec's own paths, sockets in the run dir
        (the vsock's at `agent.sock`, where the contract says the agent is)."""
        run = spec.run_dir
        return cls(
            kernel=spec.kernel,
            initrd=spec.initrd,
            disk=spec.disk,
            api_socket=run / "firecracker.sock",
            vsock=spec.agent_socket,
            log=run / "firecracker.log",
            metrics=run / "firecracker.metrics",
            config=run / "firecracker.json",
        )


def disk_format(head: bytes) -> str:
    """`qcow2` or `raw`, from a disk image's first bytes. Pure."""
    return "qcow2" if head.startswith(QCOW2_MAGIC) else "raw"


def check_disk(disk: Path) -> None:
    """Firecracker attaches raw images only: a qcow2 disk (an overlay on a base) is refused."""
    try:
        with disk.open("rb") as f:
            head = f.read(len(QCOW2_MAGIC))
    except OSError as exc:
        raise FirecrackerConfigError(f"the disk {disk} cannot be read: {exc}") from exc
    if disk_format(head) != "raw":
        raise FirecrackerConfigError(
            f"the disk {disk} is qcow2: Firecracker attaches raw disks only (flatten it, or give "
            "the computer a reflinked or copied raw disk)"
        )


def check_spec(spec: VmSpec) -> None:
    """What Firecracker cannot do with a spec, refused before anything starts. Pure."""
    if not 1 <= spec.vcpus <= MAX_VCPUS:
        raise FirecrackerConfigError(f"Firecracker runs 1 to {MAX_VCPUS} vCPUs, not {spec.vcpus}")
    if spec.memory_mib < 1:
        raise FirecrackerConfigError(f"guest memory must be at least 1 MiB, not {spec.memory_mib}")
    if spec.memory_file is not None and not spec.restore:
        raise FirecrackerConfigError(
            "Firecracker boots on anonymous memory: a guest RAM file is only a saved memory "
            "to restore from (restore=True)"
        )
    if spec.memory_readonly:
        raise FirecrackerConfigError(
            "Firecracker opens a snapshot's memory file itself: a shared read-only image is "
            "not supported (maps_read_only is False)"
        )


def kernel_cmdline(spec: VmSpec) -> str:
    """The guest's command line: the QEMU driver's `sanbox.*` arguments (qemu.kernel_cmdline),
    with Firecracker's console and reboot. Firecracker appends `root=/dev/vda rw` for the root
    drive and the `virtio_mmio.device=` arguments of its devices itself. Pure."""
    args = [
        "console=ttyS0",
        "quiet",
        "panic=-1",
        "reboot=k",  # a guest reboot makes Firecracker exit, as QEMU's -no-reboot does
        "pci=off",
        "rootfstype=ext4",
        "init=/sbin/sanbox-init",
        "ipv6.disable=1",
        f"sanbox.hostname={spec.hostname}",
    ]
    if spec.net is not None:
        args += [f"sanbox.ip={spec.net.guest_cidr}", f"sanbox.gw={spec.net.gateway}"]
        if spec.net.dns:
            args.append(f"sanbox.dns={spec.net.dns}")
    args.append(f"sanbox.agent=vsock:{AGENT_VSOCK_PORT}")
    args += list(spec.extra_cmdline)
    return " ".join(args)


def rate_limiter(rate: DiskRate) -> dict[str, Any] | None:
    """The root drive's `rate_limiter`: a token bucket each for bytes and requests. A bucket of
    `size` refilled every `refill_time` ms runs at size/refill_time and has no peak rate, so the
    burst QEMU allows (its excess over the sustained rate for BURST_SECONDS) is the bucket's
    room above one second's worth, refilled at the sustained rate. None when unbounded. Pure."""
    limiter: dict[str, Any] = {}
    for key, sustained, burst in (
        ("bandwidth", rate.bps, rate.burst_bps),
        ("ops", rate.iops, rate.burst_iops),
    ):
        if sustained:
            size = sustained + (burst - sustained) * BURST_SECONDS
            limiter[key] = {"size": size, "refill_time": size * 1000 // sustained}
    return limiter or None


def vm_config(spec: VmSpec, paths: FirecrackerPaths) -> dict[str, Any]:
    """The `--config-file` document: Firecracker boots it at once (no InstanceStart call)."""
    check_spec(spec)
    config: dict[str, Any] = {
        "boot-source": {
            "kernel_image_path": str(paths.kernel),
            "initrd_path": str(paths.initrd),
            "boot_args": kernel_cmdline(spec),
        },
        "drives": [
            {
                "drive_id": "root",
                "path_on_host": str(paths.disk),
                "is_root_device": True,
                "is_read_only": False,
                "cache_type": "Writeback",  # the guest's flushes reach the disk
                "io_engine": "Sync",
            }
        ],
        "machine-config": {
            "vcpu_count": spec.vcpus,
            "mem_size_mib": spec.memory_mib,
            "smt": False,
            "track_dirty_pages": False,
        },
        "network-interfaces": [],
        "vsock": {"guest_cid": GUEST_CID, "uds_path": str(paths.vsock)},
        "logger": {
            "log_path": str(paths.log),
            "level": "Warning",
            "show_level": True,
            "show_log_origin": False,
        },
        "metrics": {"metrics_path": str(paths.metrics)},
        "entropy": {},  # virtio-rng, as QEMU's virtio-rng-device
    }
    limiter = rate_limiter(spec.disk_rate)
    if limiter is not None:
        config["drives"][0]["rate_limiter"] = limiter
    if spec.net is not None:
        config["network-interfaces"].append(
            {"iface_id": "net0", "host_dev_name": spec.net.tap, "guest_mac": spec.net.mac}
        )
    return config

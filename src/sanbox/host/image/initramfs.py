"""The initramfs: static busybox, the virtio modules and an /init that switch_roots to the disk."""

from __future__ import annotations

import gzip
from pathlib import Path

from .cpio import CpioWriter
from .errors import BuildStepError
from .kernel import Kernel, download, unpack
from .recipe import ASSETS

MODULES = (
    "virtio_ring",
    "virtio",
    "virtio_mmio",
    "virtio_pci_legacy_dev",
    "virtio_pci_modern_dev",
    "virtio_pci",
    "virtio_blk",
    "failover",
    "net_failover",
    "virtio_net",
    "virtio_console",
    "virtio-rng",
    "vsock",
    "vmw_vsock_virtio_transport_common",
    "vmw_vsock_virtio_transport",
)


def find_module(kernel: Kernel, name: str) -> Path | None:
    for candidate in (name, name.replace("-", "_")):
        found = sorted(kernel.modules.rglob(f"{candidate}.ko"))
        if found:
            return found[0]
    return None


def build(kernel: Kernel, work: Path, out: Path) -> None:
    busybox_tree = work / "busybox-pkg"
    unpack(download("busybox-static", work / "debs", "initramfs"), busybox_tree, "initramfs")
    busybox = busybox_tree / "bin" / "busybox"
    if not busybox.is_file():
        raise BuildStepError("initramfs", "busybox-static has no bin/busybox")
    with gzip.open(out, "wb", compresslevel=6) as sink:
        cpio = CpioWriter(sink)  # type: ignore[arg-type]
        for d in ("bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules"):
            cpio.directory(d)
        cpio.file("bin/busybox", busybox.read_bytes(), 0o755)
        cpio.file("init", (ASSETS / "initramfs-init.sh").read_bytes(), 0o755)
        for name in MODULES:
            path = find_module(kernel, name)
            if path is None:
                if name.startswith(("virtio_blk", "virtio_mmio", "virtio_console")):
                    raise BuildStepError("initramfs", f"kernel {kernel.release} lacks {name}.ko")
                continue
            cpio.file(f"lib/modules/{name}.ko", path.read_bytes())
        cpio.close()

"""The initramfs: static busybox, the virtio modules and an /init that switch_roots to the disk."""

from __future__ import annotations

import gzip
from pathlib import Path

from .cpio import CpioWriter
from .errors import BuildStepError
from .kernel import Kernel, download, unpack
from .recipe import ASSETS

# What a microvm guest needs, in dependency order (/init loads them in this order). Only
# virtio-mmio devices: no PCI transport. vsock comes with the Firecracker driver, which uses it.
MODULES = (
    "virtio_ring",
    "virtio",
    "virtio_mmio",
    "virtio_blk",
    "failover",
    "net_failover",
    "virtio_net",
    "virtio_console",
    "virtio-rng",
)
REQUIRED = ("virtio_mmio", "virtio_blk", "virtio_console")
SIGNATURE_MAGIC = b"~Module signature appended~\n"
_SIGNATURE_INFO = 12  # struct module_signature: 8 bytes of fields, then the big-endian length


def strip_signature(module: bytes) -> bytes:
    """`module` without its appended signature. The kernel checks a signature it finds (slow
    under emulation: a hash of the whole module and an RSA verification per load) but loads
    unsigned modules when signatures are not enforced, as on a stock Debian kernel."""
    if not module.endswith(SIGNATURE_MAGIC):
        return module
    info_end = len(module) - len(SIGNATURE_MAGIC)
    sig_len = int.from_bytes(module[info_end - 4 : info_end], "big")
    end = info_end - _SIGNATURE_INFO - sig_len
    if end <= 0:
        return module  # not a signature we understand: leave the module as it is
    return module[:end]


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
        loaded = []
        for name in MODULES:
            path = find_module(kernel, name)
            if path is None:
                if name in REQUIRED:
                    raise BuildStepError("initramfs", f"kernel {kernel.release} lacks {name}.ko")
                continue  # built into this kernel, or not needed by it
            cpio.file(f"lib/modules/{name}.ko", strip_signature(path.read_bytes()))
            loaded.append(name)
        cpio.file("lib/modules/load", "".join(f"{name}\n" for name in loaded).encode())
        cpio.close()

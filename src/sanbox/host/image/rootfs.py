"""The root disk: a Debian minbase tree from mmdebstrap, Sanbox's init and agent, kernel modules,
made into a sparse raw ext4 image with `mkfs.ext4 -d`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ._command import run
from .kernel import Kernel
from .recipe import ASSETS, GUEST_PACKAGE, Recipe


def bootstrap(recipe: Recipe, tree: Path) -> None:
    run(
        "rootfs",
        [
            "mmdebstrap",
            "--variant=minbase",
            "--mode=root",
            "--quiet",
            f"--include={','.join(recipe.packages)}",
            '--aptopt=Acquire::Languages "none"',
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            recipe.suite,
            str(tree),
            *recipe.sources(),
        ],
        hint="check the network to the Debian mirror (SANBOX_DEBIAN_MIRROR)",
    )


def install_sanbox(tree: Path, kernel: Kernel) -> None:
    """Put Sanbox's init, poweroff and agent on the disk, with the kernel's modules."""
    sbin = tree / "sbin"
    shutil.copyfile(ASSETS / "init.sh", sbin / "sanbox-init")
    shutil.copyfile(ASSETS / "poweroff.sh", sbin / "sanbox-poweroff")
    os.chmod(sbin / "sanbox-init", 0o755)
    os.chmod(sbin / "sanbox-poweroff", 0o755)
    agent = tree / "opt" / "sanbox" / "sanbox_guest"
    shutil.rmtree(agent, ignore_errors=True)
    shutil.copytree(GUEST_PACKAGE, agent, ignore=shutil.ignore_patterns("__pycache__"))
    modules = tree / "lib" / "modules" / kernel.release
    shutil.rmtree(modules, ignore_errors=True)
    shutil.copytree(kernel.modules, modules, symlinks=True)
    run("rootfs", ["depmod", "-b", str(tree), kernel.release])
    # compiled once here, not at every first boot of every computer (slow under TCG)
    run("rootfs", ["chroot", str(tree), "python3", "-m", "compileall", "-q", "/opt/sanbox"])
    # every computer gets its own identity at first boot (SSH host key: at first use)
    (tree / "etc" / "machine-id").write_text("")
    for key in (tree / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()
    sshd_dropins = tree / "etc" / "ssh" / "sshd_config.d"
    sshd_dropins.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ASSETS / "sshd_config", sshd_dropins / "sanbox.conf")
    (tree / "etc" / "hostname").write_text("sanbox\n")
    (tree / "etc" / "resolv.conf").unlink(missing_ok=True)
    (tree / "etc" / "resolv.conf").write_text("")
    (tree / "etc" / "fstab").write_text("/dev/vda / ext4 rw,relatime 0 1\n")


def make_image(tree: Path, image: Path, size_gib: int) -> None:
    with open(image, "wb") as f:
        f.truncate(size_gib * 1024**3)
    run(
        "disk image",
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-L",
            "sanbox-root",
            "-E",
            "lazy_itable_init=0,lazy_journal_init=0",
            "-d",
            str(tree),
            str(image),
        ],
    )

"""The guest kernel: Debian's cloud kernel package, fetched with apt, unpacked with dpkg-deb."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ._command import run
from .errors import BuildStepError

_NETWORK_HINT = "check the network to the Debian mirror and run `apt-get update`"


@dataclass(frozen=True)
class Kernel:
    release: str  # e.g. 6.1.0-57-cloud-amd64
    vmlinuz: Path
    modules: Path  # lib/modules/<release>


def resolve_package(metapackage: str) -> str:
    """linux-image-cloud-amd64 -> linux-image-6.1.0-57-cloud-amd64 (its current dependency)."""
    out = run("kernel", ["apt-cache", "depends", metapackage], hint=_NETWORK_HINT)
    for line in out.splitlines():
        m = re.match(r"\s*Depends:\s*(linux-image-\S+)", line)
        if m:
            return m.group(1)
    raise BuildStepError("kernel", f"{metapackage} has no linux-image dependency", _NETWORK_HINT)


def download(package: str, into: Path, step: str) -> Path:
    """apt-get download PACKAGE into a folder and return the .deb."""
    into.mkdir(parents=True, exist_ok=True)
    run(step, ["apt-get", "download", "-q", package], cwd=into, hint=_NETWORK_HINT)
    debs = sorted(into.glob(f"{package}_*.deb"))
    if not debs:
        raise BuildStepError(step, f"apt-get download {package} produced no .deb", _NETWORK_HINT)
    return debs[-1]


def unpack(deb: Path, into: Path, step: str) -> None:
    into.mkdir(parents=True, exist_ok=True)
    run(step, ["dpkg-deb", "-x", str(deb), str(into)])


def fetch(metapackage: str, work: Path) -> Kernel:
    package = resolve_package(metapackage)
    release = package.removeprefix("linux-image-")
    tree = work / "kernel-pkg"
    unpack(download(package, work / "debs", "kernel"), tree, "kernel")
    vmlinuz = tree / "boot" / f"vmlinuz-{release}"
    modules = tree / "lib" / "modules" / release
    if not vmlinuz.is_file() or not modules.is_dir():
        raise BuildStepError("kernel", f"{package} has no boot/vmlinuz-{release} or modules")
    return Kernel(release=release, vmlinuz=vmlinuz, modules=modules)

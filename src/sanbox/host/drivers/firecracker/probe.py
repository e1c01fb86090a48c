"""Whether this host can run Firecracker: a `firecracker` binary on PATH that reports its version,
the `jailer` beside it when VMs are confined, and a usable KVM (`/dev/kvm` opens read-write,
`KVM_GET_API_VERSION` is 12 and `KVM_CREATE_VM` makes a VM). Firecracker has no software
emulation: without KVM it cannot run at all. `doctor` and the driver choice ask
`firecracker_available()`; its reason is shown as it is."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess

KVM_GET_API_VERSION = 0xAE00  # _IO(KVMIO, 0x00)
KVM_CREATE_VM = 0xAE01  # _IO(KVMIO, 0x01)
KVM_API_VERSION = 12  # the only one Linux has ever had
VERSION_TIMEOUT = 5.0
_VERSION = re.compile(r"v?(\d+\.\d+\.\d+)")


def binary_version(name: str, path: str | None = None) -> tuple[str | None, str]:
    """(version, "") of the program `name` on PATH (`path` if given), or (None, reason)."""
    binary = shutil.which(name, path=path)
    if binary is None:
        return None, f"no {name} binary on PATH"
    try:
        out = subprocess.run(
            [binary, "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{binary} --version failed: {exc}"
    words = (out.stdout or out.stderr).strip().splitlines()
    match = _VERSION.search(words[0]) if words else None
    if out.returncode != 0 or match is None:
        said = words[0][:200] if words else f"exit {out.returncode}"
        return None, f"{binary} reports no version ({said})"
    return match[1], ""


def kvm_usable(device: str = "/dev/kvm") -> str:
    """ "" if KVM can make a VM here, else why not."""
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        return f"KVM not usable: {device}: {exc.strerror}"
    try:
        try:
            api = fcntl.ioctl(fd, KVM_GET_API_VERSION)
        except OSError as exc:
            return f"KVM not usable: {device}: KVM_GET_API_VERSION failed: {exc.strerror}"
        if api != KVM_API_VERSION:
            return f"KVM not usable: {device} speaks KVM API {api}, not {KVM_API_VERSION}"
        try:
            vm = fcntl.ioctl(fd, KVM_CREATE_VM, 0)
        except OSError as exc:
            return f"KVM not usable: {device}: KVM_CREATE_VM failed: {exc.strerror}"
        os.close(vm)
        return ""
    finally:
        os.close(fd)


def firecracker_available(
    path: str | None = None, kvm_device: str = "/dev/kvm", jailer: bool = True
) -> tuple[bool, str]:
    """(True, what was found) or (False, the first reason it cannot run here)."""
    version, reason = binary_version("firecracker", path)
    if version is None:
        return False, reason
    found = f"firecracker v{version}"
    if jailer:
        jailer_version, reason = binary_version("jailer", path)
        if jailer_version is None:
            return False, f"{reason} (confinement needs Firecracker's jailer)"
        if jailer_version != version:
            return False, f"jailer v{jailer_version} does not match firecracker v{version}"
        found += f", jailer v{jailer_version}"
    reason = kvm_usable(kvm_device)
    if reason:
        return False, reason
    return True, f"{found}, KVM usable"

"""Which acceleration this host gets: KVM if a probe guest boots with it, TCG otherwise.

The probe boots the image's kernel and initramfs with `sanbox.probe` on the command line (the
initramfs prints a marker and powers off). On a nested KVM that cannot run a stock guest the probe
hangs, so the result is cached per host (QEMU version, host kernel, /dev/kvm) and
`SANBOX_ACCEL=kvm|tcg` overrides it.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import VmmError
from .argv import SANDBOX

PROBE_MARKER = b"SANBOX-PROBE-OK"
PROBE_TIMEOUT = 10.0
ACCELS = ("kvm", "tcg")


@dataclass(frozen=True)
class AccelChoice:
    accel: str  # kvm | tcg
    reason: str
    probed_at: float
    host_key: str


def qemu_binary() -> str:
    path = shutil.which("qemu-system-x86_64")
    if path is None:
        from ...errors import MissingToolError

        raise MissingToolError("qemu-system-x86_64", "qemu-system-x86")
    return path


@functools.cache
def qemu_version() -> str:
    out = subprocess.run([qemu_binary(), "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


@functools.cache
def host_key() -> str:
    version = subprocess.run(
        [qemu_binary(), "--version"], capture_output=True, text=True, check=False
    ).stdout.splitlines()[:1]
    kvm = os.access("/dev/kvm", os.R_OK | os.W_OK)
    return f"{platform.release()}|{version[0] if version else '?'}|kvm={kvm}"


def host_mhz() -> float:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1])
    return 2000.0


def probe_kvm(kernel: Path, initrd: Path, timeout: float = PROBE_TIMEOUT) -> tuple[bool, str]:
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is missing or not accessible"
    argv = [
        qemu_binary(),
        "-accel",
        "kvm",
        "-cpu",
        "host",
        "-M",
        "microvm",
        "-m",
        "128",
        "-nodefaults",
        "-no-user-config",
        "-nographic",
        "-no-reboot",
        "-serial",
        "stdio",
        "-sandbox",
        SANDBOX,
        "-kernel",
        str(kernel),
        "-initrd",
        str(initrd),
        "-append",
        "console=ttyS0 panic=-1 reboot=t sanbox.probe",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    seen = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            chunk = proc.stdout.read() or b""
            seen += chunk
            if PROBE_MARKER in seen:
                return True, "a probe guest booted under KVM"
            if proc.poll() is not None and not chunk:
                tail = seen.decode(errors="replace").strip().splitlines()[-1:]
                return False, f"KVM probe guest exited early: {' '.join(tail) or proc.returncode}"
            time.sleep(0.05)
        return False, f"a probe guest did not boot under KVM within {timeout:.0f}s"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


def choose_accel(
    cache_dir: Path, kernel: Path, initrd: Path, override: str | None = None
) -> AccelChoice:
    """`override` (the operator's SANBOX_ACCEL) if set; else the cached probe for this host;
    else probe now and cache."""
    if override:
        if override not in ACCELS:
            raise VmmError(f"SANBOX_ACCEL={override!r} is not one of kvm, tcg")
        return AccelChoice(override, "set by SANBOX_ACCEL", time.time(), "override")
    key = host_key()
    cache = cache_dir / "accel.json"
    try:
        cached = AccelChoice(**json.loads(cache.read_text()))
        if cached.host_key == key:
            return cached
    except (OSError, ValueError, TypeError):
        pass
    ok, reason = probe_kvm(kernel, initrd)
    choice = AccelChoice("kvm" if ok else "tcg", reason, time.time(), key)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(choice)))
    os.replace(tmp, cache)
    return choice


def cached_accel(cache_dir: Path) -> AccelChoice | None:
    try:
        cached = AccelChoice(**json.loads((cache_dir / "accel.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return cached if cached.host_key == host_key() else None

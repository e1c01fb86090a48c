"""``control`` streams: ping, set_clock, set_hostname, metrics, and SSH: ssh_host_key (made on
first use), ssh_new_host_key (a new SSH identity), ssh_authorize (a key root may log in with);
for snapshots and forks: fs_freeze / fs_thaw (the root filesystem held still, thawed by itself
after a timeout, freeze.py) and new_identity (identity.py); services: the statuses the
template services' supervisor writes (services.py); listening: whether a loopback port has a
listener, asked of the kernel (tcp.py: a readiness check that does not wake the service)."""

from __future__ import annotations

import ctypes
import os
import socket
import time
from typing import Any

from . import freeze, ssh
from . import protocol as p
from .errors import AgentRequestError
from .identity import new_identity
from .service_files import read_statuses
from .stream import Stream, param_int, param_str
from .tcp import listening

CLOCK_REALTIME = 0


def uptime() -> float:
    """Seconds since boot, as /proc/uptime's first field says (the boot-time clock, read through
    the vDSO: a /proc read costs ~0.2 ms under TCG, on every ping)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


_boot_id: str | None = None


def boot_id() -> str:
    """This kernel's boot id, read once: it changes only with a new boot, and so a new agent."""
    global _boot_id
    if _boot_id is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                _boot_id = f.read().strip()
        except OSError:
            return ""
    return _boot_id


def identity() -> dict[str, Any]:
    return {"uptime": uptime(), "boot_id": boot_id(), "agent_version": p.AGENT_VERSION}


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def timespec(unix_time: float) -> tuple[int, int]:
    sec = int(unix_time // 1)
    nsec = min(int(round((unix_time - sec) * 1e9)), 999_999_999)
    return sec, nsec


_libc: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    """The C library, loaded once. Not `ctypes.util.find_library`: it runs `ldconfig -p` in a
    subprocess, which costs a tenth of a second under TCG right when a restored guest resyncs."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL("libc.so.6", use_errno=True)
    return _libc


def set_clock(unix_time: float) -> None:
    """CLOCK_REALTIME set to `unix_time`. Outside a VM (an agent given a root of its own, the
    component tier's stand-in) the clock is the host's: nothing to set, and nothing is."""
    if ssh.paths().root != "/":
        return
    ts = _Timespec(*timespec(unix_time))
    if libc().clock_settime(CLOCK_REALTIME, ctypes.byref(ts)) != 0:
        err = ctypes.get_errno()
        raise AgentRequestError.from_os_error(OSError(err, os.strerror(err)), "clock_settime")


def set_hostname(name: str) -> None:
    if not name or len(name) > 64 or not all(c.isalnum() or c in "-." for c in name):
        raise AgentRequestError("bad_request", f"invalid hostname {name!r}")
    try:
        socket.sethostname(name)
    except OSError as exc:
        raise AgentRequestError.from_os_error(exc, "sethostname") from None
    try:
        with open("/etc/hostname", "w") as f:
            f.write(name + "\n")
    except OSError:
        pass  # a read-only /etc is fine; the kernel hostname is what counts


def metrics() -> dict[str, Any]:
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    cpu = {n: int(v) / tick for n, v in zip(names, fields, strict=False)}
    with open("/proc/loadavg") as f:
        load = [float(x) for x in f.read().split()[:3]]
    mem: dict[str, int] = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                mem[key] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    vfs = os.statvfs("/")
    return {
        "cpu_count": os.cpu_count() or 1,
        "cpu_seconds": cpu,
        "load": load,
        "memory": {
            "total": mem.get("MemTotal", 0),
            "free": mem.get("MemFree", 0),
            "available": mem.get("MemAvailable", 0),
            "cached": mem.get("Cached", 0),  # the page cache (an agent before: absent)
        },
        "disk": {
            "total": vfs.f_blocks * vfs.f_frsize,
            "free": vfs.f_bfree * vfs.f_frsize,
            "available": vfs.f_bavail * vfs.f_frsize,
        },
        "uptime": uptime(),
        "time": time.time(),
    }


class ControlStream(Stream):
    kind = "control"

    async def run(self) -> None:
        op = self.params.get("op")
        if op == "ping":
            self.send_last("result", **identity())
        elif op == "set_clock":
            value = self.params.get("time")
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise AgentRequestError("bad_request", "time must be a number")
            set_clock(float(value))
            self.send_last("result", time=time.time())
        elif op == "set_hostname":
            set_hostname(param_str(self.params, "hostname"))
            self.send_last("result")
        elif op == "metrics":
            self.send_last("result", **metrics())
        elif op == "ssh_host_key":
            self.send_last("result", public_key=await ssh.host_key())
        elif op == "ssh_new_host_key":
            self.send_last("result", public_key=await ssh.new_host_key())
        elif op == "fs_freeze":
            timeout = self.params.get("timeout", 10.0)
            if not isinstance(timeout, int | float) or isinstance(timeout, bool):
                raise AgentRequestError("bad_request", "timeout must be a number")
            if ssh.paths().root != "/":  # not in a VM: `/` would be the host's filesystem
                raise AgentRequestError("not_supported", "fs_freeze runs inside a computer only")
            freeze.ROOT.freeze(float(timeout))
            self.send_last("result", frozen=True)
        elif op == "fs_thaw":
            self.send_last("result", thawed=freeze.ROOT.thaw())
        elif op == "new_identity":
            await new_identity(self.params, set_hostname, set_clock)
            self.send_last("result", hostname=socket.gethostname())
        elif op == "listening":
            port = param_int(self.params, "port")
            if not 0 < port < 65536:
                raise AgentRequestError("bad_request", f"bad port {port}")
            self.send_last("result", listening=listening(port))
        elif op == "services":
            self.send_last("result", services=read_statuses())
        elif op == "ssh_authorize":
            self.send_last("result", added=ssh.authorize(param_str(self.params, "public_key")))
        else:
            raise AgentRequestError("bad_request", f"unknown control op {op!r}")

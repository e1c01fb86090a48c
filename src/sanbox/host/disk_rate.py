"""The disk I/O bound every computer of a host gets: bytes and requests per second, sustained,
with a short burst above them. Driver-neutral: each driver applies it in its own hypervisor
(QEMU's drive throttling in `qemu/argv.py`, Firecracker's drive `rate_limiter` in
`firecracker/config.py`), so it holds on any host: cgroup v1 or v2, whatever the disk's I/O
scheduler (cgroup `io.weight` does nothing under `none` or `mq-deadline`). Where cgroup v2's io
controller is present, `drivers/cgroup.py` also writes it as `io.max` on the data dir's disk.

The same bound for every computer of a host, whatever its size (not scaled by vCPUs): it
protects what all of them share, the host's disk and the control plane's fsyncs on it, whose
capacity does not grow with a guest's vCPUs. The operator sets it to a fraction of the disk
(`SANBOX_DISK_MAX_BPS`, `SANBOX_DISK_MAX_IOPS`: host/settings.py); 0 leaves that dimension
unbounded.

A burst: `BURST_FACTOR` times the sustained rate for up to `BURST_SECONDS` (a boot, a package
install), after which the guest is held to the sustained rate until it has been quieter."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024
DEFAULT_BPS = 256 * MIB  # bytes per second, reads and writes together
DEFAULT_IOPS = 8000  # requests per second, reads and writes together
BURST_FACTOR = 2
BURST_SECONDS = 5


@dataclass(frozen=True)
class DiskRate:
    """A computer's disk I/O bound: sustained bytes and requests per second (0: unbounded)."""

    bps: int = DEFAULT_BPS
    iops: int = DEFAULT_IOPS

    def __post_init__(self) -> None:
        if self.bps < 0 or self.iops < 0:
            raise ValueError("a disk rate is 0 (unbounded) or a positive number per second")

    @property
    def bounded(self) -> bool:
        return bool(self.bps or self.iops)

    @property
    def burst_bps(self) -> int:
        return self.bps * BURST_FACTOR

    @property
    def burst_iops(self) -> int:
        return self.iops * BURST_FACTOR

    def describe(self, how: str | None) -> str:
        """In words, for `sanbox doctor` and GET /v1/host; `how`: the driver's way of holding a
        VM to it (`Capabilities.disk_rate`), None if it has none."""
        if not self.bounded:
            return "unbounded (SANBOX_DISK_MAX_BPS=0, SANBOX_DISK_MAX_IOPS=0)"
        if how is None:
            return "unbounded: this driver does not throttle its VMs' disks"
        sustained, burst = [], []
        if self.bps:
            sustained.append(_rate(self.bps))
            burst.append(_rate(self.burst_bps))
        if self.iops:
            sustained.append(f"{self.iops} IOPS")
            burst.append(f"{self.burst_iops} IOPS")
        free = (
            ""
            if self.bps and self.iops
            else ", bytes unbounded"
            if self.iops
            else ", IOPS unbounded"
        )
        bursts = f"bursts {', '.join(burst)} for up to {BURST_SECONDS} s"
        return f"{', '.join(sustained)} ({bursts}){free}: {how}"


UNBOUNDED = DiskRate(0, 0)


def _rate(bps: int) -> str:
    return f"{bps // MIB} MiB/s" if bps % MIB == 0 else f"{bps} B/s"

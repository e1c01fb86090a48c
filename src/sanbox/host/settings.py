"""What the host layer takes from its environment, read in one place and passed down: nothing
below reads an environment variable of its own.

| variable | setting | default |
|---|---|---|
| SANBOX_DATA_DIR | `data_dir`: disks, images, snapshots, the host's keys | /var/lib/sanbox |
| SANBOX_RAM_DIR | `ram_dir`: guests' RAM files (a tmpfs), one per host agent | /dev/shm |
| SANBOX_ACCEL | `accel`: kvm or tcg instead of the probe's choice | the probe's |
| SANBOX_RESTORE | `restore`: map (saved memory mapped privately) or copy (copied back) | map |
| SANBOX_PAUSE | `pause`: in-place (a resumed VM's written pages) or stream (its RAM) | in-place |
| SANBOX_SNAPSHOT | `snapshot`: auto, live or stopped (see below) | auto |
| SANBOX_TCG_ASLR | `tcg_aslr`: off boots emulated guests with `norandmaps` (see below) | on |
| SANBOX_DEBIAN_MIRROR | `debian_mirror`: where image builds fetch Debian | deb.debian.org |
| SANBOX_VM_UIDS | `vm_uids`: FIRST-LAST, its VMs' uids (one part per host agent) | all |
| SANBOX_DISK_MAX_BPS | `disk_max_bps`: a computer's disk bytes/s (0: none) | 268435456 |
| SANBOX_DISK_MAX_IOPS | `disk_max_iops`: a computer's disk requests/s (0: none) | 8000 |
| SANBOX_VM_OVERHEAD_MIB | `vm_overhead_mib`: MiB counted per VM's hypervisor | the driver's |

SANBOX_SNAPSHOT says how a running computer's memory snapshot is saved. `live`: as its guest
runs (pre-copy), its vCPUs stopped only for the last pages, where the hypervisor can
(`live_memory_save`: KVM, or QEMU >= 9.0 under TCG; before 9.0, TCG loses pages written during
the copy, so there the snapshot is taken stopped whatever is asked). `stopped`: the vCPUs stop
while the state is saved. `auto`: live where the hypervisor can, except for a computer resumed
from its own saved memory, whose stopped save writes only the pages it wrote since (a live save
would stream all its RAM). A fork is taken stopped either way (its copies wait for all of it).

SANBOX_TCG_ASLR=off trades the guests' address randomization for speed under emulation only
(QEMU without KVM; a KVM guest is never affected): QEMU before 8.0 translates an x86 guest's code
per virtual address, so every new guest process at its random addresses has its libraries'
code translated afresh (spawning `true` 26-28 ms); without randomization each is translated
once (5.6-7.8 ms). QEMU 8.0 and later translate position-independently and need no such trade.
It weakens every guest's defence against memory-corruption exploits: leave it on where guests
run code or visit sites that are not trusted. A guest keeps the mode it booted with across
pause, snapshot and fork, and so do the computers made of a snapshot (a template's ready one, a
warm pool's members) until it is taken again.

SANBOX_DISK_MAX_BPS and SANBOX_DISK_MAX_IOPS bound every computer's disk alike, sustained, with
bursts of twice that for up to 5 s (`host/disk_rate.py`): its hypervisor throttles the guest's
disk (QEMU's drive throttling, Firecracker's rate limiter), on any host, and where cgroup v2's io
controller serves the data filesystem's disk its `io.max` holds the VM's process to the burst
rates too. One guest writing and syncing flat out then cannot stall the other guests' disks, nor
the control plane's database on the same filesystem. Set them to a fraction of what the disk
does; 0 lifts that bound (a computer may then take the whole disk).

SANBOX_VM_OVERHEAD_MIB is the memory admission counts for each VM's hypervisor beyond its guest
RAM, for every running VM and each new one, against the RAM dir: its size is the budget for
guests' RAM and their hypervisors together. By default the driver's estimate
(`Capabilities.hypervisor_memory_mib`: QEMU 64 MiB, under TCG 320 with its code cache;
Firecracker 16): set it higher where the hypervisors hold more (a busy TCG guest's QEMU may
grow to its cgroup's ceiling), lower (0: guest RAM only) to pack more computers at the OOM
killer's risk.

A fleet host's egress gateway (`sanbox host serve`) reads the server's egress variables, with the
same meaning: SANBOX_UPSTREAM_DNS (`upstream_dns`, host[:port]; default the host's system
resolver), SANBOX_CA_BUNDLE (`ca_bundle`: CAs the secret proxy trusts upstream),
SANBOX_TENANT_PRIVATE_RANGES (`tenant_private_ranges`), SANBOX_EGRESS_MAX_CONNECTIONS (per
computer, 512), SANBOX_EGRESS_MAX_CONNECTIONS_PER_ORG and SANBOX_EGRESS_MAX_CONNECTIONS_TOTAL,
and the DNS bounds (`dns_bounds`, `egress/dns_bounds.py`; `dns_bounds_of` reads them for the
server too):

| variable | what | default |
|---|---|---|
| SANBOX_EGRESS_DNS_RATE | DNS queries a second one computer may ask, sustained | 100 |
| SANBOX_EGRESS_DNS_BURST | ... and at once | 200 |
| SANBOX_EGRESS_DNS_CACHE_NAMES | names one computer's resolver caches | 1024 |
| SANBOX_EGRESS_DNS_HOST_CACHE_NAMES | names all of a host's computers cache, together | 65536 |

A computer past its rate is answered REFUSED until its bucket refills; one whose cache is full
drops its own least recently used name (never another computer's). The rate is at most 100,000
a second, a computer's cache at least 1 name and at most the host's, the host's at most
10,000,000.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .disk_rate import DEFAULT_BPS, DEFAULT_IOPS, DiskRate
from .egress.budget import MAX_CONNECTIONS_PER_ORG, MAX_CONNECTIONS_TOTAL
from .egress.dns_bounds import DnsBounds
from .errors import HostError

DEFAULT_DATA_DIR = Path("/var/lib/sanbox")
DEFAULT_RAM_DIR = Path("/dev/shm")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
ACCELS = ("kvm", "tcg")
RESTORES = ("map", "copy")
PAUSES = ("in-place", "stream")
SNAPSHOTS = ("auto", "live", "stopped")


class SettingsError(HostError):
    code = "invalid_setting"


@dataclass(frozen=True)
class HostSettings:
    data_dir: Path = DEFAULT_DATA_DIR
    ram_dir: Path = DEFAULT_RAM_DIR
    accel: str | None = None  # None: the probe decides
    restore: str = "map"
    pause: str = "in-place"
    snapshot: str = "auto"
    tcg_aslr: bool = True  # False: emulated guests boot with `norandmaps`
    debian_mirror: str = DEFAULT_MIRROR
    upstream_dns: str | None = None  # host[:port]; None: the system's resolver
    ca_bundle: Path | None = None
    tenant_private_ranges: str | None = None
    egress_max_connections: int = 512
    egress_max_connections_per_org: int = MAX_CONNECTIONS_PER_ORG
    egress_max_connections_total: int = MAX_CONNECTIONS_TOTAL
    dns_bounds: DnsBounds = DnsBounds()  # each computer's DNS query rate, the cache sizes
    vm_uids: str | None = None  # FIRST-LAST (drivers/confine.py `UidRange`); None: all
    disk_max_bps: int = DEFAULT_BPS  # 0: no bound
    disk_max_iops: int = DEFAULT_IOPS  # 0: no bound
    vm_overhead_mib: int | None = None  # per VM's hypervisor, for admission; None: the driver's

    @property
    def disk_rate(self) -> DiskRate:
        """Every computer's disk I/O bound."""
        return DiskRate(self.disk_max_bps, self.disk_max_iops)

    @property
    def upstream(self) -> tuple[str, int] | None:
        return upstream_of(self.upstream_dns)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HostSettings:
        env = os.environ if env is None else env
        accel = env.get("SANBOX_ACCEL", "").strip().lower() or None
        if accel is not None and accel not in ACCELS:
            raise SettingsError(f"SANBOX_ACCEL={accel!r} is not one of {', '.join(ACCELS)}")
        restore = env.get("SANBOX_RESTORE", "").strip().lower() or "map"
        if restore not in RESTORES:
            raise SettingsError(f"SANBOX_RESTORE={restore!r} is not one of {', '.join(RESTORES)}")
        pause = env.get("SANBOX_PAUSE", "").strip().lower() or "in-place"
        if pause not in PAUSES:
            raise SettingsError(f"SANBOX_PAUSE={pause!r} is not one of {', '.join(PAUSES)}")
        snapshot = env.get("SANBOX_SNAPSHOT", "").strip().lower() or "auto"
        if snapshot not in SNAPSHOTS:
            raise SettingsError(
                f"SANBOX_SNAPSHOT={snapshot!r} is not one of {', '.join(SNAPSHOTS)}"
            )
        tcg_aslr = env.get("SANBOX_TCG_ASLR", "").strip().lower() or "on"
        if tcg_aslr not in ("on", "off"):
            raise SettingsError(f"SANBOX_TCG_ASLR={tcg_aslr!r} is not one of on, off")
        return cls(
            data_dir=Path(env.get("SANBOX_DATA_DIR") or DEFAULT_DATA_DIR),
            ram_dir=Path(env.get("SANBOX_RAM_DIR") or DEFAULT_RAM_DIR),
            accel=accel,
            restore=restore,
            pause=pause,
            snapshot=snapshot,
            tcg_aslr=tcg_aslr == "on",
            debian_mirror=env.get("SANBOX_DEBIAN_MIRROR") or DEFAULT_MIRROR,
            upstream_dns=env.get("SANBOX_UPSTREAM_DNS") or None,
            ca_bundle=Path(env["SANBOX_CA_BUNDLE"]) if env.get("SANBOX_CA_BUNDLE") else None,
            tenant_private_ranges=env.get("SANBOX_TENANT_PRIVATE_RANGES") or None,
            egress_max_connections=_count(env, "SANBOX_EGRESS_MAX_CONNECTIONS", 512),
            egress_max_connections_per_org=_count(
                env, "SANBOX_EGRESS_MAX_CONNECTIONS_PER_ORG", MAX_CONNECTIONS_PER_ORG
            ),
            egress_max_connections_total=_count(
                env, "SANBOX_EGRESS_MAX_CONNECTIONS_TOTAL", MAX_CONNECTIONS_TOTAL
            ),
            dns_bounds=dns_bounds_of(env),
            vm_uids=env.get("SANBOX_VM_UIDS") or None,
            disk_max_bps=_amount(env, "SANBOX_DISK_MAX_BPS", DEFAULT_BPS),
            disk_max_iops=_amount(env, "SANBOX_DISK_MAX_IOPS", DEFAULT_IOPS),
            vm_overhead_mib=_mib(env, "SANBOX_VM_OVERHEAD_MIB"),
        )


def upstream_of(text: str | None) -> tuple[str, int] | None:
    """`host[:port]` (port 53 unless given) of the DNS server egress resolves with; None: the
    system's."""
    if not text:
        return None
    host, _, port = text.partition(":")
    return host, int(port or 53)


def dns_bounds_of(env: Mapping[str, str]) -> DnsBounds:
    """The host's DNS bounds from SANBOX_EGRESS_DNS_RATE, _BURST, _CACHE_NAMES and
    _HOST_CACHE_NAMES (each unset one its default); SettingsError naming what is wrong."""
    default = DnsBounds()
    text = env.get("SANBOX_EGRESS_DNS_RATE", "").strip()
    try:
        rate = float(text) if text else default.rate
    except ValueError:
        raise SettingsError(
            f"SANBOX_EGRESS_DNS_RATE={text!r} is not a number of queries a second"
        ) from None
    burst = _count(env, "SANBOX_EGRESS_DNS_BURST", default.burst)
    names = _count(env, "SANBOX_EGRESS_DNS_CACHE_NAMES", default.cache_names)
    host_names = _count(env, "SANBOX_EGRESS_DNS_HOST_CACHE_NAMES", default.host_cache_names)
    try:
        return DnsBounds(rate, burst, names, host_names)
    except ValueError as exc:
        raise SettingsError(
            f"{exc} (SANBOX_EGRESS_DNS_RATE, _BURST, _CACHE_NAMES, _HOST_CACHE_NAMES)"
        ) from None


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise SettingsError(f"{name}={text!r} is not a positive whole number")
    return int(text)


def _amount(env: Mapping[str, str], name: str, default: int) -> int:
    """A whole number from 0 up (0: no bound), at most 10^12 (QEMU takes up to 10^15)."""
    text = env.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) > 10**12:
        raise SettingsError(f"{name}={text!r} is not a whole number from 0 to 10^12 (0: no bound)")
    return int(text)


def _mib(env: Mapping[str, str], name: str) -> int | None:
    """A whole number of MiB from 0 up to 1 TiB's worth; None when unset."""
    text = env.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) > 1024 * 1024:
        raise SettingsError(f"{name}={text!r} is not a whole number of MiB from 0 to 1048576")
    return int(text)

"""Where Sanbox keeps things on this host: one data dir, with images, computers and host facts.

<data dir>/images/<template>/<build>/     read-only images (kernel, initrd, rootfs.raw)
<data dir>/computers/<id>/disk.qcow2      the computer's persistent root disk: a qcow2 overlay on
                                          its image (or disk.raw: a reflink clone, or older)
<data dir>/computers/<id>/disk             after a snapshot: a symlink to its overlay in layers/
<data dir>/computers/<id>/run/            pidfile, QMP and agent sockets of the running VM
<data dir>/computers/<id>/state/          saved memory and device state
<data dir>/computers/<id>/logs/           console log
<data dir>/host/                          facts about this host (acceleration probe), its secret
                                          key (host/secret.key, 0600: MACs and signed cookies),
                                          the sealing key of secrets (host/secrets.key, 0600)
<data dir>/snapshots/<snp_id>/            a snapshot: its MACed manifest (written last) naming its
                                          disk layer, and its saved memory (memory/) if it has one
<data dir>/layers/<lyr_id>.{qcow2,raw,json} frozen read-only disk layers (a snapshot's disk, the
                                          backing of computers' overlays) with their manifests
<data dir>/tmp/                           builds in progress (same filesystem: renames are atomic)
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LayoutError
from ..settings import DEFAULT_DATA_DIR as DEFAULT_DATA_DIR
from ..settings import HostSettings

_COMPUTER_ID = re.compile(r"[a-z][a-z0-9_-]{2,62}")
_SNAPSHOT_ID = re.compile(r"snp_[a-z0-9]{2,60}")


def default_ram_dir() -> Path:
    """Where running guests' RAM files live: a tmpfs, so memory is not written back to disk."""
    return HostSettings.from_env().ram_dir


def default_data_dir() -> Path:
    return HostSettings.from_env().data_dir


@dataclass(frozen=True)
class ComputerDir:
    root: Path

    @property
    def disk(self) -> Path:
        """The computer's disk: a qcow2 overlay, or (reflink clones, computers made before
        overlays) a raw file; once it has been snapshotted, the overlay in the layer store its
        `disk` link names (by its real path: the path QEMU opens never changes meaning)."""
        if self.disk_link.is_symlink():
            return Path(os.path.realpath(self.disk_link))
        return self.raw_disk if self.raw_disk.exists() else self.overlay_disk

    @property
    def disk_link(self) -> Path:
        """A symlink to the computer's current overlay in the layer store, once it has one."""
        return self.root / "disk"

    @property
    def overlay_disk(self) -> Path:
        return self.root / "disk.qcow2"

    @property
    def raw_disk(self) -> Path:
        return self.root / "disk.raw"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def console_log(self) -> Path:
        return self.logs / "console.log"


@dataclass(frozen=True)
class DataDir:
    root: Path
    # guests' RAM files (a tmpfs): one per host agent on a machine, so two never count each other's
    ram_dir: Path = field(default_factory=default_ram_dir, compare=False)

    @classmethod
    def default(cls) -> DataDir:
        return cls(default_data_dir())

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def computers(self) -> Path:
        return self.root / "computers"

    @property
    def host(self) -> Path:
        return self.root / "host"

    @property
    def secret_key(self) -> Path:
        return self.host / "secret.key"

    @property
    def sealing_key(self) -> Path:
        """The key secrets are sealed under (unless SANBOX_SECRETS_KEY_FILE puts it elsewhere)."""
        return self.host / "secrets.key"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def snapshots(self) -> Path:
        return self.root / "snapshots"

    @property
    def quarantine(self) -> Path:
        """Computers' folders set aside (disks kept): what a fleet host held that the control
        plane no longer places on it (root's only: 0700)."""
        return self.root / "quarantine"

    @property
    def layers(self) -> Path:
        return self.root / "layers"

    def snapshot(self, snapshot_id: str) -> Path:
        """A snapshot's folder (which exists only once the snapshot is complete)."""
        if not isinstance(snapshot_id, str) or not _SNAPSHOT_ID.fullmatch(snapshot_id):
            raise LayoutError(f"invalid snapshot id {snapshot_id!r}: snp_ and letters or digits")
        return self.snapshots / snapshot_id

    def ram_file(self, computer_id: str) -> Path:
        """A running computer's RAM file; named after the data dir so two data dirs never mix."""
        return self.ram_dir / f"sanbox-{self.tag}-{computer_id}.ram"

    @property
    def tag(self) -> str:
        """A short name for this data dir, for host-wide names (RAM files, namespaces)."""
        return hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:6]

    def computer(self, computer_id: str) -> ComputerDir:
        if not isinstance(computer_id, str) or not _COMPUTER_ID.fullmatch(computer_id):
            raise LayoutError(
                f"invalid computer id {computer_id!r}: use lowercase letters and digits"
            )
        return ComputerDir(self.computers / computer_id)

    def computer_ids(self) -> list[str]:
        if not self.computers.is_dir():
            return []
        return sorted(p.name for p in self.computers.iterdir() if p.is_dir())

    def require_inside(self, path: Path) -> Path:
        """Resolve `path` and refuse it unless it lies inside the data dir."""
        resolved = Path(os.path.realpath(path))
        root = Path(os.path.realpath(self.root))
        if resolved != root and root not in resolved.parents:
            raise LayoutError(f"{path} is outside the data dir {self.root}: keep disks under it")
        return resolved

    def ensure(self) -> None:
        for d in (self.images, self.computers, self.host, self.tmp, self.snapshots, self.layers):
            d.mkdir(parents=True, exist_ok=True)

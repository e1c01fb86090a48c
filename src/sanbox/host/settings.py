"""What the host layer takes from its environment, read in one place and passed down: nothing
below reads an environment variable of its own.

| variable | setting | default |
|---|---|---|
| SANBOX_DATA_DIR | `data_dir`: disks, images, snapshots, the host's keys | /var/lib/sanbox |
| SANBOX_RAM_DIR | `ram_dir`: guests' RAM files (a tmpfs), one per host agent | /dev/shm |
| SANBOX_ACCEL | `accel`: kvm or tcg instead of the probe's choice | the probe's |
| SANBOX_RESTORE | `restore`: map (saved memory mapped privately) or copy (copied back) | map |
| SANBOX_DEBIAN_MIRROR | `debian_mirror`: where image builds fetch Debian | deb.debian.org |
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import HostError

DEFAULT_DATA_DIR = Path("/var/lib/sanbox")
DEFAULT_RAM_DIR = Path("/dev/shm")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
ACCELS = ("kvm", "tcg")
RESTORES = ("map", "copy")


class SettingsError(HostError):
    code = "invalid_setting"


@dataclass(frozen=True)
class HostSettings:
    data_dir: Path = DEFAULT_DATA_DIR
    ram_dir: Path = DEFAULT_RAM_DIR
    accel: str | None = None  # None: the probe decides
    restore: str = "map"
    debian_mirror: str = DEFAULT_MIRROR

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HostSettings:
        env = os.environ if env is None else env
        accel = env.get("SANBOX_ACCEL", "").strip().lower() or None
        if accel is not None and accel not in ACCELS:
            raise SettingsError(f"SANBOX_ACCEL={accel!r} is not one of {', '.join(ACCELS)}")
        restore = env.get("SANBOX_RESTORE", "").strip().lower() or "map"
        if restore not in RESTORES:
            raise SettingsError(f"SANBOX_RESTORE={restore!r} is not one of {', '.join(RESTORES)}")
        return cls(
            data_dir=Path(env.get("SANBOX_DATA_DIR") or DEFAULT_DATA_DIR),
            ram_dir=Path(env.get("SANBOX_RAM_DIR") or DEFAULT_RAM_DIR),
            accel=accel,
            restore=restore,
            debian_mirror=env.get("SANBOX_DEBIAN_MIRROR") or DEFAULT_MIRROR,
        )

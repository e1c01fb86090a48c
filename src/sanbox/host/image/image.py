"""A built image: kernel + initramfs + root disk, with the manifest that says what it is."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..data.layout import DataDir
from . import archive
from .errors import ImageError, ImageNotFoundError
from .recipe import recipe_for

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Image:
    template: str
    build_id: str
    path: Path
    kernel_release: str
    disk_size_gib: int

    @property
    def kernel(self) -> Path:
        return self.path / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.path / "initrd.img"

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs.raw"

    @property
    def disk_size_bytes(self) -> int:
        return self.rootfs.stat().st_size

    @classmethod
    def load(cls, path: Path) -> Image:
        data = json.loads((path / MANIFEST).read_text())
        return cls(
            template=data["template"],
            build_id=data["build_id"],
            path=path,
            kernel_release=data["kernel_release"],
            disk_size_gib=data["disk_size_gib"],
        )

    def manifest(self) -> dict[str, object]:
        return {
            "template": self.template,
            "build_id": self.build_id,
            "kernel_release": self.kernel_release,
            "disk_size_gib": self.disk_size_gib,
        }


def image_dir(data_dir: DataDir, template: str, build_id: str) -> Path:
    return data_dir.images / template / build_id


def current_build_id(template_dir: Path, template: str) -> str:
    """The build a new computer of a built-in template gets: its recipe as it is now, from the
    archive state its last `image build` read (`images/<template>/archive.json`)."""
    stamp = archive.read_stamp(template_dir)
    return recipe_for(template).build_id(archive.digest(stamp) if stamp else None)


def find_image(data_dir: DataDir, template: str, build_id: str | None = None) -> Image:
    """The image for a template: build `build_id` when given and still there (a computer boots
    the build its disk came from), else the build of the current recipe, else the newest
    complete build."""
    if build_id is not None:
        pinned = image_dir(data_dir, template, build_id)
        if (pinned / MANIFEST).is_file():
            return Image.load(pinned)
    current = image_dir(data_dir, template, current_build_id(data_dir.images / template, template))
    if (current / MANIFEST).is_file():
        return Image.load(current)
    builds = sorted(
        (p for p in (data_dir.images / template).glob("*") if (p / MANIFEST).is_file()),
        key=lambda p: (p / MANIFEST).stat().st_mtime,
    )
    if builds:
        return Image.load(builds[-1])
    raise ImageNotFoundError(template)


def find_build(data_dir: DataDir, build_id: str) -> Image:
    """The build `build_id` of whichever recipe made it (a user template's computers boot the
    image at the root of its chain)."""
    for path in sorted(data_dir.images.glob(f"*/{build_id}")):
        if (path / MANIFEST).is_file():
            return Image.load(path)
    raise ImageNotFoundError(build_id)


def list_builds(data_dir: DataDir) -> list[Image]:
    """Every complete build on this host, by template then age (oldest first)."""
    builds = [p for p in data_dir.images.glob("*/*") if (p / MANIFEST).is_file()]
    builds.sort(key=lambda p: (p.parent.name, (p / MANIFEST).stat().st_mtime))
    return [Image.load(p) for p in builds]


def is_current(image: Image) -> bool:
    """Whether `image` is the build of its template's recipe as it is now (what a new computer
    gets). A template that is no longer known has no current build."""
    try:
        return current_build_id(image.path.parent, image.template) == image.build_id
    except ImageError:
        return False


def allocated_bytes(image: Image) -> int:
    """Bytes the build takes on disk (its root disk is sparse)."""
    return sum(p.stat().st_blocks * 512 for p in image.path.iterdir() if p.is_file())


REMOVED_PREFIX = "removed-"


def remove_build(data_dir: DataDir, image: Image) -> None:
    """Remove a build: renamed out of `images/` first (atomic), so a half-removed build is never
    found, then deleted. Leftovers of a removal that was cut short go too."""
    doomed = data_dir.tmp / f"{REMOVED_PREFIX}{image.template}-{image.build_id}-{os.getpid()}"
    os.rename(image.path, doomed)
    for leftover in data_dir.tmp.glob(f"{REMOVED_PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)

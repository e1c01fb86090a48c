"""Build an image from its recipe, cached by content hash: a second build of the same inputs is a
no-op, and a failed build leaves nothing in the cache."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..data.durable import fsync_path
from ..data.layout import DataDir
from . import archive, initramfs, kernel, rootfs
from ._command import require_tool
from .image import MANIFEST, Image, image_dir
from .recipe import Recipe, recipe_for

STEPS = ("kernel", "initramfs", "rootfs", "install", "disk image", "publish")


@dataclass(frozen=True)
class BuildProgress:
    step: str
    index: int  # 0-based
    total: int
    cached: bool = False


ProgressCallback = Callable[[BuildProgress], None]


class ImageBuilder:
    def __init__(self, data_dir: DataDir) -> None:
        self.data_dir = data_dir
        self.notes: list[str] = []  # what the last build has to say (archive, packages)

    def _stamp(self, recipe: Recipe) -> dict[str, str] | None:
        """The archive's state now; the last build's when the mirror cannot be read (said)."""
        previous = archive.read_stamp(self.data_dir.images / recipe.name)
        try:
            return archive.fetch_stamp(recipe.sources())
        except archive.ArchiveError as exc:
            keeping = "keeping the archive state of the last build" if previous else "building"
            self.notes.append(f"could not check the Debian archive ({exc}): {keeping}")
            return previous

    def build(
        self, template: str, on_progress: ProgressCallback | None = None, *, force: bool = False
    ) -> Image:
        recipe = recipe_for(template)
        report = on_progress or (lambda _p: None)
        self.notes = []
        stamp = self._stamp(recipe)
        # once: the inputs may change while we build
        build_id = recipe.build_id(archive.digest(stamp) if stamp else None)
        target = image_dir(self.data_dir, template, build_id)
        if (target / MANIFEST).is_file() and not force:
            if stamp:
                archive.write_stamp(target.parent, stamp)
            report(BuildProgress("cached", len(STEPS), len(STEPS), cached=True))
            return Image.load(target)
        for tool in ("apt-get", "apt-cache", "dpkg-deb", "mmdebstrap", "mkfs.ext4", "depmod"):
            require_tool(tool)
        self.data_dir.ensure()
        work = Path(tempfile.mkdtemp(prefix=f"build-{template}-", dir=self.data_dir.tmp))
        try:
            staged = work / "image"
            staged.mkdir()
            previous = self._newest(template)
            image = self._build(recipe, build_id, stamp, work, staged, report)
            self._publish(staged, target)
            if stamp:  # now the current build
                archive.write_stamp(target.parent, stamp)
            if previous is not None:
                changed = archive.summary(_packages(previous), _packages(target))
                self.notes.append(f"since build {previous.name}: {changed}")
            report(BuildProgress("publish", len(STEPS), len(STEPS)))
            return image.__class__.load(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _newest(self, template: str) -> Path | None:
        builds = [
            p for p in (self.data_dir.images / template).glob("*") if (p / MANIFEST).is_file()
        ]
        return max(builds, key=lambda p: (p / MANIFEST).stat().st_mtime, default=None)

    def _build(
        self,
        recipe: Recipe,
        build_id: str,
        stamp: dict[str, str] | None,
        work: Path,
        staged: Path,
        report: ProgressCallback,
    ) -> Image:
        total = len(STEPS)
        report(BuildProgress("kernel", 0, total))
        k = kernel.fetch(recipe.kernel_package, work)
        shutil.copyfile(k.vmlinuz, staged / "vmlinuz")
        report(BuildProgress("initramfs", 1, total))
        initramfs.build(k, work, staged / "initrd.img")
        report(BuildProgress("rootfs", 2, total))
        tree = work / "rootfs"
        rootfs.bootstrap(recipe, tree)
        packages = archive.installed((tree / "var/lib/dpkg/status").read_text(errors="replace"))
        report(BuildProgress("install", 3, total))
        rootfs.install_sanbox(tree, k)
        report(BuildProgress("disk image", 4, total))
        rootfs.make_image(tree, staged / "rootfs.raw", recipe.disk_size_gib)
        report(BuildProgress("publish", 5, total))
        image = Image(
            template=recipe.name,
            build_id=build_id,
            path=staged,
            kernel_release=k.release,
            disk_size_gib=recipe.disk_size_gib,
        )
        for name in ("vmlinuz", "initrd.img", "rootfs.raw"):
            os.chmod(staged / name, 0o444)
        manifest = staged / MANIFEST
        record = {**image.manifest(), "archive": stamp or {}, "packages": packages}
        manifest.write_text(json.dumps(record, indent=2) + "\n")
        return image

    def _publish(self, staged: Path, target: Path) -> None:
        """fsync the files, rename the folder into place; the manifest inside marks it complete."""
        for f in staged.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            shutil.rmtree(target)
        os.rename(staged, target)
        fsync_path(target.parent)


def _packages(build: Path) -> dict[str, str]:
    """The packages a build's manifest lists (none for a build made before they were listed)."""
    try:
        listed = json.loads((build / MANIFEST).read_text()).get("packages") or {}
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in listed.items()}

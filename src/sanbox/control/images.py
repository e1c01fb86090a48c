"""The host's image builds: which exist, which is current, which computers use them, and pruning
the ones nothing needs. A build is kept while it is its template's current build (what a new
computer gets; or, with no current build, the newest, which find_image falls back to) or while
any computer's disk came from it (it boots that build's kernel and initramfs)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..host.door import Image, allocated_bytes, is_current
from ..store import repo
from .fleet import Fleet


@dataclass(frozen=True)
class Build:
    image: Image
    current: bool
    computers: int  # computers whose disk came from it
    bytes: int  # on disk
    needed: bool  # kept by a prune


def inventory(fleet: Fleet) -> list[Build]:
    with fleet.db.session() as s:
        in_use = repo.image_builds_in_use(s)
    images = fleet.runtime.builds()  # by template, oldest first
    by_template: dict[str, list[Image]] = {}
    for image in images:
        by_template.setdefault(image.template, []).append(image)
    current = {image.path for image in images if is_current(image)}
    # what find_image gives a computer with no recorded build: the current build, else the newest
    fallback = {
        next((i for i in group if i.path in current), group[-1]).path
        for group in by_template.values()
    }
    builds = []
    for image in images:
        count = in_use.get((image.template, image.build_id), 0)
        if image.path in fallback:
            count += in_use.get((image.template, None), 0)
        builds.append(
            Build(
                image,
                image.path in current,
                count,
                allocated_bytes(image),
                needed=image.path in fallback or count > 0,
            )
        )
    return builds


async def prune(fleet: Fleet) -> list[Build]:
    """Remove every build nothing needs; returns what was removed. Decided in one step of the
    event loop, so no create or start in between can come to need a build it removes."""
    doomed = [b for b in inventory(fleet) if not b.needed]
    for build in doomed:
        await asyncio.to_thread(fleet.runtime.remove_build, build.image)
    return doomed

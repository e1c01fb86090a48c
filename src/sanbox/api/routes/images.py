"""/v1/images: the host's image builds, and pruning the ones nothing needs (host-admin keys:
the builds serve every org)."""

from __future__ import annotations

from fastapi import APIRouter

from ...control.images import Build
from ..schemas import ErrorBody, ImageBuildList, ImageBuildOut, PruneResult
from ._deps import Plane
from .admin import HostAdmin

router = APIRouter(
    prefix="/v1", tags=["admin"], responses={c: {"model": ErrorBody} for c in (401, 403)}
)


def build_out(build: Build) -> ImageBuildOut:
    return ImageBuildOut(
        template=build.image.template,
        build_id=build.image.build_id,
        kernel_release=build.image.kernel_release,
        current=build.current,
        computers=build.computers,
        bytes=build.bytes,
        needed=build.needed,
    )


@router.get("/images", response_model=ImageBuildList)
async def list_images(_a: HostAdmin, plane: Plane) -> ImageBuildList:
    return ImageBuildList(images=[build_out(b) for b in plane.image_builds()])


@router.post("/images/prune", response_model=PruneResult)
async def prune_images(_a: HostAdmin, plane: Plane) -> PruneResult:
    """Remove the builds no computer came from and no new computer would get."""
    removed = await plane.prune_image_builds()
    return PruneResult(
        removed=[build_out(b) for b in removed], freed_bytes=sum(b.bytes for b in removed)
    )

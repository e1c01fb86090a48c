"""/v1/pools: warm pools of computers of a template, kept running and unclaimed so a create is a
claim. `PUT /v1/pools/{template}` sets a pool's size (0 empties it)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from ...control.pools import MAX_SIZE, PoolStatus
from ._deps import Auth, Plane
from .computers import ERRORS

router = APIRouter(prefix="/v1", tags=["pools"], responses=ERRORS)


class PoolSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = Field(ge=0, le=MAX_SIZE, description="computers kept ready (0: none)")


class Pool(BaseModel):
    template: str
    size: int
    ready: int = Field(
        description="members a create could claim now: running and warmed, on a host that "
        "answers, in the region a create that asks for none runs in"
    )
    starting: int = Field(description="members being made or warmed")
    unavailable: int = Field(
        description="members a claim cannot take now (on a host that is away or draining, in a "
        "region the org no longer runs in, or waiting to be discarded); the pool is refilled "
        "without counting them",
    )
    refill: str = Field(description="full, filling, shrinking, or blocked: why")

    @classmethod
    def of(cls, status: PoolStatus) -> Pool:
        return cls(
            template=status.pool.template,
            size=status.pool.size,
            ready=status.ready,
            starting=status.starting,
            unavailable=status.unavailable,
            refill=status.refill,
        )


class PoolList(BaseModel):
    pools: list[Pool]


@router.put("/pools/{template}", response_model=Pool)
async def set_pool(template: str, body: PoolSet, auth: Auth, plane: Plane) -> Pool:
    """Keep `size` computers of the template ready; creates of it claim one (then it refills)."""
    return Pool.of(plane.set_pool(auth.org, template, body.size))


@router.get("/pools", response_model=PoolList)
async def list_pools(auth: Auth, plane: Plane) -> PoolList:
    return PoolList(pools=[Pool.of(p) for p in plane.pool_status(auth.org)])

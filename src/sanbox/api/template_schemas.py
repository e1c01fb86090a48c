"""The API's template records: the built-in templates and an org's own (built from a spec)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from ..store.models import TemplateRow


class Template(BaseModel):
    name: str
    id: str | None = Field(default=None, description="tpl_...; none for a built-in template")
    builtin: bool = Field(default=False, description="built into Sanbox, everyone's")
    org: str | None = None
    region: str | None = Field(
        default=None,
        description="where this build of it is: a fleet region (its layers and ready snapshot "
        "are on a host of it); none for this server's own host or a built-in template",
    )
    state: str = Field(default="ready", description="building | ready | failed")
    base: str | None = Field(default=None, description="the template it is built on")
    image: str | None = Field(default=None, description="the image build at the root of its disk")
    vcpus: int = 1
    memory_mib: int = 512
    disk_gib: int = Field(default=0, description="0: the image's size")
    env: dict[str, str] = Field(default_factory=dict)
    allow: list[str] = Field(default_factory=list, description="its computers' egress allowlist")
    ports: list[int] = Field(default_factory=list, description="published on its computers")
    idle_timeout: int = 0
    ready_snapshot: bool = Field(
        default=False, description="creates restore a booted, ready computer (else they boot)"
    )
    ready_reason: str | None = Field(default=None, description="why there is no ready snapshot")
    error: str | None = Field(default=None, description="why the last build failed")
    steps: int = 0
    cached_steps: int = Field(
        default=0, description="steps the last build reused from earlier builds"
    )
    build_seconds: float = 0.0
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def of(cls, row: TemplateRow, org_name: str) -> Template:
        return cls(
            name=row.name,
            id=row.id,
            org=org_name,
            region=row.region or None,
            state=row.state,
            base=row.base,
            image=row.image,
            vcpus=row.vcpus,
            memory_mib=row.memory_mib,
            disk_gib=row.disk_gib,
            env=dict(row.env),
            allow=list(row.allow),
            ports=list(row.ports),
            idle_timeout=row.idle_timeout,
            ready_snapshot=row.ready_snapshot_id is not None,
            ready_reason=row.ready_reason,
            error=row.error,
            steps=row.steps,
            cached_steps=row.cached_steps,
            build_seconds=row.build_seconds,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


class TemplateList(BaseModel):
    templates: list[Template]


class BuildCachePruned(BaseModel):
    removed_steps: int = Field(description="cached build steps deleted: no template stands on them")
    kept_steps: int = Field(description="cached build steps the org's templates stand on")
    freed_bytes: int = Field(description="disk space freed on the host")


class TemplateBuild(BaseModel):
    template: Template
    building: bool = Field(
        description="a build runs (follow GET /v1/templates/{ref}/logs); false: it was up to date"
    )

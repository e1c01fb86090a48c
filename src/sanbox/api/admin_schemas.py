"""Request and response bodies of the API's administration: orgs and their quotas, API keys,
the audit log."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from ..control.quotas import MAX_LIMIT
from ..store.models import ApiKey, AuditRow
from .schemas import Name, Text


class OrgCreate(BaseModel):
    name: Name


class OrgOut(BaseModel):
    id: str
    name: str
    created_at: datetime


class OrgList(BaseModel):
    orgs: list[OrgOut]


_LIMIT = "at most this many at once; null: no limit"


class QuotaLimits(BaseModel):
    """An org's quota (every field replaced; null or absent: no limit)."""

    model_config = ConfigDict(extra="forbid")
    running: int | None = Field(None, ge=0, le=MAX_LIMIT, description="computers with compute")
    vcpus: int | None = Field(None, ge=0, le=MAX_LIMIT, description="their vCPUs")
    memory_mib: int | None = Field(None, ge=0, le=MAX_LIMIT, description="their memory, MiB")
    disk_gib: int | None = Field(
        None, ge=0, le=MAX_LIMIT, description="every computer's disk, any state, GiB"
    )
    snapshots: int | None = Field(None, ge=0, le=MAX_LIMIT, description=_LIMIT)


class QuotaUse(BaseModel):
    running: int
    vcpus: int
    memory_mib: int
    disk_gib: int
    snapshots: int


class OrgRegions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    home: str | None = Field(
        None, max_length=32, description="where its computers run unless they ask; null: anywhere"
    )
    allowed: list[str] = Field(
        default_factory=list, max_length=16, description="other regions its computers may ask for"
    )


class OrgRegionsOut(OrgRegions):
    org: str


class QuotaOut(BaseModel):
    org: str
    limits: QuotaLimits
    use: QuotaUse


class KeyCreate(BaseModel):
    org: Name | None = Field(None, description="the org the key acts for; default: the caller's")
    name: Text = ""
    admin: bool = Field(False, description="may manage its org's keys and read its audit")
    host_admin: bool = Field(
        False, description="may manage every org (a host admin's key only may make one)"
    )
    expires_in: int | None = Field(
        None, ge=1, le=10 * 365 * 86400, description="seconds from now until it stops working"
    )
    expires_at: datetime | None = Field(None, description="when it stops working (with a zone)")


class KeyInfo(BaseModel):
    """A key as listed: never the key itself, only its first characters (`prefix`)."""

    id: str
    org: str
    name: str
    prefix: str
    admin: bool
    host_admin: bool
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = Field(None, description="to the minute")

    @classmethod
    def of(cls, key: ApiKey, org_name: str) -> KeyInfo:
        return cls(
            id=key.id,
            org=org_name,
            name=key.name,
            prefix=key.prefix,
            admin=key.admin,
            host_admin=key.host_admin,
            created_at=key.created_at,
            expires_at=key.expires_at,
            revoked_at=key.revoked_at,
            last_used_at=key.last_used_at,
        )


class KeyOut(KeyInfo):
    key: str = Field(description="the key: shown this once, stored only as a hash")


class KeyList(BaseModel):
    keys: list[KeyInfo]


class AuditRecordOut(BaseModel):
    id: int
    time: datetime = Field(description="when the request came in")
    org: str | None = Field(None, description="the actor's org")
    key_id: str | None = None
    key_prefix: str | None = Field(None, description="the actor; none: no known key")
    action: str = Field(description="method and route, e.g. `POST /v1/computers/{ref}/stop`")
    target: dict[str, str] = Field(description="the route's parameters, e.g. `{ref: box}`")
    status: int = Field(description="HTTP status; 101: a WebSocket session")
    code: str | None = Field(None, description="the error's code, if it failed")
    client: str | None = Field(None, description="the client's address")

    @classmethod
    def of(cls, row: AuditRow, org_name: str | None) -> AuditRecordOut:
        return cls(
            id=row.id,
            time=row.created_at,
            org=org_name,
            key_id=row.key_id,
            key_prefix=row.key_prefix,
            action=row.action,
            target=row.target,
            status=row.status,
            code=row.code,
            client=row.client,
        )


class AuditList(BaseModel):
    records: list[AuditRecordOut]

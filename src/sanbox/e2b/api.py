"""E2B's control API under /e2b, mapped onto Sanbox computers through the control plane's front
door (`Computers`), with the same checks as /v1: the `X-API-KEY` header carries a Sanbox key,
every sandbox is a computer of the key's org, admission and quotas hold on create.

- `templateID` is a template (or type) name, or a snapshot id of the org (`snp_…`).
- `timeout` is the computer's lifetime deadline (`control.deadlines`) counted from now: the SDK
  may lengthen or shorten it; a connect only lengthens one that exists (a computer made through
  /v1 without a lifetime keeps none). At its end the computer is deleted,
  or, with `autoPause`, paused with its memory (`on_lifetime="pause"`), stopped without it
  (`autoPauseMemory: false`), or suspended with `autoResume` (`on_lifetime="suspend"`: its next
  envd call or port connection wakes it, as the idle watcher's suspension does).
- What Sanbox does not offer (`volumeMounts`, `mcp`, `iam`, some `network` settings) is refused
  at a create when given (400 naming it), never dropped.
- `pause` with memory is Sanbox's pause (a suspension, for a sandbox with `autoResume`: its next
  use wakes it, as E2B's); without memory it is a stop. Either ends the lifetime, as E2B keeps no
  timeout for a paused sandbox: it is kept until connected or killed, whatever its timeout does.
  One the idle watcher suspended (`running` to E2B) is paused where it rests. `connect` resumes or
  starts a sandbox at rest (answering 201) and returns 200 for a running one; one on its way
  (an auto-pause, a stop) is waited for first, then resumed or started; one whose lifetime a pause
  ended runs for connect's timeout from then, as E2B's resume gives.
- `allow_internet_access=false` is an empty egress allowlist; `network.allowOut` is the list.
- `metadata` are kept as given (any keys, `control.names.check_metadata`'s bounds), apart from the
  labels; the pairs that are valid labels are labels too, for /v1. E2B's own settings are labels
  under `e2b/`, never shown as metadata."""

from __future__ import annotations

import dataclasses
import functools
import urllib.parse
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..control import templates
from ..control.computers import Computers
from ..control.create import CreateRequest
from ..control.errors import InvalidRequestError
from ..control.keys import Principal
from ..control.lifecycle import Change
from ..control.names import LABELS_MAX, METADATA_MAX
from ..control.states import State
from ..store.models import ComputerRow, Org, SnapshotRow
from . import identity
from .identity import AUTO_PAUSE, PUBLIC_TRAFFIC
from .network import NetworkBody, NetworkUpdate, updated_allow
from .routing import GONE, E2bRoute, principal, sandbox_row
from .shapes import (
    MAX_TIMEOUT,
    at_rest,
    detail,
    lifetime_from_now,
    metric,
    page_limit,
    page_offset,
    page_token,
    sandbox,
    state_of,
)

DEFAULT_TIMEOUT = 300
LIST_LIMIT = 100


router = APIRouter(prefix="/e2b", route_class=E2bRoute, include_in_schema=False)


class AutoResume(BaseModel):
    model_config = ConfigDict(extra="ignore")
    enabled: bool = False


class NewSandbox(BaseModel):
    """A create's body: every field the SDK sends (2.45.1 to 2.63.0) is read. What Sanbox does
    not offer (`volumeMounts`, `mcp`, `iam`) is refused when given, never dropped; `secure` is
    always so (every envd call needs the sandbox's token)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    template_id: str = Field(alias="templateID", min_length=1, max_length=200)
    timeout: int = Field(DEFAULT_TIMEOUT, ge=0, le=MAX_TIMEOUT)
    auto_pause: bool = Field(False, alias="autoPause")
    auto_pause_memory: bool = Field(True, alias="autoPauseMemory")
    auto_resume: AutoResume | None = Field(None, alias="autoResume")
    secure: bool | None = None
    metadata: dict[str, str] | None = None
    env_vars: dict[str, str] | None = Field(None, alias="envVars")
    allow_internet_access: bool | None = None
    network: NetworkBody | None = None
    volume_mounts: Any = Field(None, alias="volumeMounts")
    mcp: Any = None
    iam: Any = None

    def check_offered(self) -> None:
        for name, given in (("volumeMounts", self.volume_mounts), ("mcp", self.mcp)):
            if given:
                raise InvalidRequestError(
                    f"{name} is not offered by Sanbox: leave it out (docs/e2b.md)", "not_offered"
                )
        tokens = self.iam.get("tokens") if isinstance(self.iam, dict) else self.iam
        if tokens:
            raise InvalidRequestError(
                "iam is not offered by Sanbox: leave it out; Sanbox's secrets inject credentials "
                "(docs/secrets.md)",
                "not_offered",
            )

    def on_lifetime(self) -> str:
        """What the lifetime's end does: `delete` (E2B's kill), `pause` (with memory), `stop`
        (a pause without memory), or `suspend` (with memory, woken by its next use: E2B's
        auto-resume)."""
        resume = self.auto_resume is not None and self.auto_resume.enabled
        if resume and not (self.auto_pause and self.auto_pause_memory):
            raise InvalidRequestError(
                "autoResume needs autoPause, with memory (autoPauseMemory): a sandbox resumes on "
                "use only from a pause that kept its memory"
            )
        if not self.auto_pause:
            return "delete"
        if not self.auto_pause_memory:
            return "stop"
        return "suspend" if resume else "pause"


class ConnectBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    timeout: int = Field(DEFAULT_TIMEOUT, ge=0, le=MAX_TIMEOUT)


class PauseBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    memory: bool = True


class TimeoutBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    timeout: int = Field(ge=0, le=MAX_TIMEOUT)


async def _set_timeout(plane: Computers, p: Principal, row: ComputerRow, timeout: int) -> None:
    await plane.update(p.org, row.id, Change(lifetime=lifetime_from_now(row, timeout)))


def _create_request(body: NewSandbox) -> CreateRequest:
    body.check_offered()
    on_lifetime = body.on_lifetime()
    metadata = dict(body.metadata or {})
    labels = identity.mirrored_labels(metadata, LABELS_MAX - 2)  # room for E2B's two settings
    if body.auto_pause:
        labels[AUTO_PAUSE] = "true"
    network = body.network or NetworkBody.model_validate({})
    network.check_offered()
    labels[PUBLIC_TRAFFIC] = "false" if network.allow_public_traffic is False else "true"
    allow: tuple[str, ...] | None = None
    if network.allow_out is not None:
        allow = tuple(network.allow_out)
    if body.allow_internet_access is False:
        allow = ()
    template, snapshot = body.template_id, None
    if template.startswith("snp_"):
        template, snapshot = None, body.template_id  # type: ignore[assignment]
    return CreateRequest(
        template=template,
        env=dict(body.env_vars or {}),
        labels=labels,
        e2b_metadata=metadata,
        allow=allow,
        from_snapshot=snapshot,
        lifetime=body.timeout or 1,
        on_lifetime=on_lifetime,
        wake_lifetime=body.timeout or None,  # an auto-resumed sandbox's timeout (E2B's)
    )


def _named_snapshot(plane: Computers, org: Org, name: str | None) -> SnapshotRow | None:
    """The org's snapshot that `templateID` names, when no template has that name: E2B's
    snapshots and templates share their names."""
    if name is None or templates.builtin(name) or any(t.name == name for t in plane.templates(org)):
        return None
    return next((snap for snap in plane.snapshots(org) if snap.name == name), None)


@router.post("/sandboxes", status_code=201)
@router.post("/v2/sandboxes", status_code=201)
async def create(body: NewSandbox, request: Request) -> JSONResponse:
    p = principal(request)
    plane: Computers = request.app.state.computers
    req = _create_request(body)
    snap = _named_snapshot(plane, p.org, req.template)
    if snap is not None:  # (resolved first: a retry with its Idempotency-Key asks the same)
        req = dataclasses.replace(req, template=None, from_snapshot=snap.id)
    row = await plane.create(p.org, req, request.headers.get("idempotency-key"))
    wanted = lifetime_from_now(row, req.lifetime)  # from now: a boot or a pool's member is older
    # a create gives a lifetime (1 s at least): none here is a retry's computer whose lifetime
    # was cleared since (through /v1), and a retry does not put one back; nor to one whose
    # lifetime a pause ended since (it has none while it rests: `connect` gives the next)
    if (
        row.lifetime
        and not row.pause_ended_lifetime
        and (abs(wanted - row.lifetime) > 1 or row.on_lifetime != req.on_lifetime)
    ):
        row = await plane.update(
            p.org, row.id, Change(lifetime=wanted, on_lifetime=req.on_lifetime)
        )
    return JSONResponse(sandbox(request, row), status_code=201)


@router.post("/sandboxes/{sandbox_id}/connect")
@router.post("/v2/sandboxes/{sandbox_id}/connect")
@router.post("/sandboxes/{sandbox_id}/resume")
async def connect(sandbox_id: str, body: ConnectBody, request: Request) -> JSONResponse:
    p = principal(request)
    plane: Computers = request.app.state.computers
    row = sandbox_row(plane, p, sandbox_id)
    wanted = lifetime_from_now(row, body.timeout)
    ended = row.lifetime and row.pause_ended_lifetime  # by E2B's pause (or one under way)
    if row.lifetime and not ended and wanted > row.lifetime:  # a connect never shortens the
        # sandbox's life, nor gives one to a computer without (0: none); lengthened before it
        # runs again, or the deadline watch could pause it again between the two
        row = await plane.update(p.org, row.id, Change(lifetime=wanted))
    row, was_at_rest = await plane.come_up(p.org, row.id)  # a pause or stop under way waited for
    fresh = lifetime_from_now(row, body.timeout)
    if ended and (was_at_rest or fresh > row.lifetime):  # up with a fresh lifetime
        # (deadlines.begin_again): connect's from now if this connect brought it up, as E2B's
        # resume gives; one woken meanwhile only lengthened, as a running sandbox's
        row = await plane.update(p.org, row.id, Change(lifetime=fresh))
    return JSONResponse(sandbox(request, row), status_code=201 if was_at_rest else 200)


@router.post("/sandboxes/{sandbox_id}/pause", status_code=204)
async def pause(sandbox_id: str, request: Request) -> Response:
    p = principal(request)
    plane: Computers = request.app.state.computers
    raw = await request.body()
    try:
        memory = PauseBody.model_validate_json(raw).memory if raw.strip() else True
    except ValidationError:
        raise InvalidRequestError("the body is {memory: bool}") from None
    row = sandbox_row(plane, p, sandbox_id)
    if at_rest(row):
        return JSONResponse({"code": 409, "message": "sandbox is already paused"}, 409)
    if memory:  # one that auto-resumes is woken by its next use, as E2B's proxy wakes any paused
        # with memory whose snapshot says autoResume; its lifetime ends (E2B's paused sandbox has
        # no timeout), so nothing ends it at rest and its wake or connect gives it one
        resumes = row.on_lifetime == "suspend"
        await plane.pause(p.org, row.id, wake_on_use=resumes, ends_lifetime=True)
    else:
        why = "paused without memory (E2B): stopped"
        await plane.stop(p.org, row.id, why, ends_lifetime=True)
    return Response(status_code=204)


@router.delete("/sandboxes/{sandbox_id}", status_code=204)
async def kill(sandbox_id: str, request: Request) -> Response:
    p = principal(request)
    plane: Computers = request.app.state.computers
    row = sandbox_row(plane, p, sandbox_id)
    await plane.delete(p.org, row.id, "killed (E2B)")
    return Response(status_code=204)


@router.post("/sandboxes/{sandbox_id}/timeout", status_code=204)
async def set_timeout(sandbox_id: str, body: TimeoutBody, request: Request) -> Response:
    """As E2B's API (`KeepAliveFor`), only a running sandbox has a timeout to set: a paused one
    is not found (404, the SDK's `SandboxNotFoundException`), one being paused is 409."""
    p = principal(request)
    plane: Computers = request.app.state.computers
    row = sandbox_row(plane, p, sandbox_id)
    if State(row.state) in (State.PAUSING, State.STOPPING):
        why = f"sandbox {sandbox_id} is being paused: connect(timeout=…) resumes it with one"
        return JSONResponse({"code": 409, "message": why}, 409)
    if state_of(row) == "paused":
        why = f"sandbox {sandbox_id} is paused: connect(timeout=…) resumes it with a timeout"
        return JSONResponse({"code": 404, "message": why}, 404)
    await _set_timeout(plane, p, row, body.timeout)
    return Response(status_code=204)


@router.get("/sandboxes/{sandbox_id}")
async def info(sandbox_id: str, request: Request) -> JSONResponse:
    p = principal(request)
    plane: Computers = request.app.state.computers
    return JSONResponse(detail(request, sandbox_row(plane, p, sandbox_id)))


def _metadata_filter(raw: str | None) -> dict[str, str]:
    if not raw:
        return {}
    pairs = urllib.parse.parse_qsl(raw, keep_blank_values=True)  # the SDK quotes, then encodes
    if len(pairs) > METADATA_MAX:
        raise InvalidRequestError(f"a metadata filter has at most {METADATA_MAX} keys")
    return {urllib.parse.unquote(k): urllib.parse.unquote(v) for k, v in pairs}


def _started_after(raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidRequestError("startedAfter is an RFC 3339 time") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


@router.get("/sandboxes")
@router.get("/v2/sandboxes")
async def list_sandboxes(request: Request) -> JSONResponse:
    p = principal(request)
    plane: Computers = request.app.state.computers
    q = request.query_params
    states = {s for s in (q.get("state") or "").split(",") if s}
    if request.url.path.endswith("/e2b/sandboxes") and not states:
        states = {"running"}  # the v1 list is of running sandboxes
    template = q.get("template")
    limit = page_limit(q.get("limit"), LIST_LIMIT)
    wanted = _metadata_filter(q.get("metadata")).items()
    after = _started_after(q.get("startedAfter"))
    rows = [
        r
        for r in plane.find(p.org)
        if State(r.state) not in GONE
        and wanted <= identity.metadata(r).items()
        and (after is None or (r.started_at or r.created_at) >= after)
        and r.pool is None
        and (not states or state_of(r) in states)
        and (not template or r.template == template)
    ]
    rows.sort(key=lambda r: (r.created_at, r.id), reverse=q.get("order") == "desc")
    start = page_offset(q.get("nextToken"))
    page = rows[start : start + limit]
    headers = {"x-next-token": page_token(start + limit)} if start + limit < len(rows) else {}
    return JSONResponse([detail(request, r, False) for r in page], headers=headers)


def _unix(raw: str | None, name: str) -> int | None:
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidRequestError(f"{name} is Unix seconds") from None


@router.get("/sandboxes/{sandbox_id}/metrics")
async def metrics(sandbox_id: str, request: Request) -> JSONResponse:
    """What the usage meter sampled of the guest (every `SANBOX_USAGE_SAMPLE_INTERVAL` seconds,
    the last hour, in the server's memory), from `start` (default: the sandbox's creation) to `end`
    (default: now), oldest first."""
    p = principal(request)
    plane: Computers = request.app.state.computers
    row = sandbox_row(plane, p, sandbox_id)
    start = _unix(request.query_params.get("start"), "start")
    end = _unix(request.query_params.get("end"), "end")
    since = int(row.created_at.timestamp()) if start is None else start
    _computer, samples = plane.usage.metrics(p.org, row.id)
    return JSONResponse(
        [
            metric(row, s)
            for s in samples
            if s.cpu_percent is not None  # E2B's bounds are whole seconds, both included
            and since <= int(s.time)
            and (end is None or int(s.time) <= end)
        ]
    )


@router.put("/sandboxes/{sandbox_id}/network", status_code=204)
async def update_network(sandbox_id: str, body: NetworkUpdate, request: Request) -> Response:
    """E2B's `update_network`: the computer's allowlist replaced (network.py), applied at once."""
    p = principal(request)
    plane: Computers = request.app.state.computers
    row = sandbox_row(plane, p, sandbox_id)
    default = functools.partial(templates.allow, plane.fleet, p.org, row.template)
    await plane.set_allow(p.org, row.id, updated_allow(body, default))
    return Response(status_code=204)

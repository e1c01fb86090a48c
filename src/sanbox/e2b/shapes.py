"""What E2B's control API answers about a sandbox: a create's or connect's body (with the envd
token and always the domain), a sandbox's details (its `lifecycle` and `endAt` too), its state in
E2B's two words, a metric, the lifetime that ends a timeout from now, and a list's page tokens."""

from __future__ import annotations

import base64
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request

from ..control.deadlines import lifetime_over
from ..control.errors import InvalidRequestError
from ..control.states import State
from ..control.usage import Sample
from ..store.models import ComputerRow
from . import identity
from .identity import Tokens

MAX_TIMEOUT = 24 * 3600  # seconds: E2B's own ceiling for a sandbox's lifetime
RUNNING = {State.RUNNING, State.SUSPENDED, State.RESUMING, State.STARTING, State.CREATING}
_AT_REST = {State.PAUSED, State.SUSPENDED, State.STOPPED}


def tokens(request: Request) -> Tokens:
    found: Tokens | None = getattr(request.app.state, "e2b_tokens", None)
    if found is None:
        found = Tokens(request.app.state.settings.layout.secret_key)
        request.app.state.e2b_tokens = found
    return found


def domain(request: Request) -> str:
    settings = request.app.state.settings
    return str(settings.e2b_domain or settings.port_domain)


def state_of(row: ComputerRow) -> str:
    """`running`, or `paused`: at rest, or suspended once its lifetime ended (E2B's auto-pause
    with auto-resume: paused, woken by its next use), or by E2B's pause (`pause_ended_lifetime`,
    which ended its lifetime if it had one: `deadlines.lifetime_over`). A computer the idle
    watcher suspended within its lifetime is `running`: it is woken as soon as it is used."""
    if row.state == State.SUSPENDED:
        paused = row.pause_ended_lifetime or lifetime_over(row, datetime.now(UTC))
        return "paused" if paused else "running"
    return "running" if State(row.state) in RUNNING else "paused"


def at_rest(row: ComputerRow) -> bool:
    """Paused to E2B, and there: not on its way (pausing, stopping), nor in error, nor suspended
    by the idle watcher within its lifetime (running to E2B)."""
    return State(row.state) in _AT_REST and state_of(row) == "paused"


def lifecycle(row: ComputerRow) -> dict[str, Any]:
    """E2B's `lifecycle`: what its timeout does (`kill` for a delete; a pause, a stop (a pause
    without memory) or a suspension are `pause`) and whether it resumes on use (a suspension)."""
    return {
        "onTimeout": "kill" if row.on_lifetime == "delete" else "pause",
        "autoResume": row.on_lifetime == "suspend",
    }


def _iso(when: datetime) -> str:
    return when.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")


def ends_at(row: ComputerRow) -> datetime:
    """E2B's `endAt`: a running sandbox's timeout's end (far off without one); a paused one's
    pause, as E2B answers the time its last snapshot was taken, or, at rest since before that
    was kept, when its record last changed."""
    if at_rest(row):
        return row.rested_at or row.updated_at
    return row.created_at + timedelta(seconds=row.lifetime or MAX_TIMEOUT * 365)


def sandbox(request: Request, row: ComputerRow) -> dict[str, Any]:
    """The body of a create or connect: what the SDK needs to reach envd (always the domain)."""
    t = tokens(request)
    return {
        "templateID": row.template,
        "sandboxID": identity.sandbox_id(row.id),
        "clientID": identity.CLIENT_ID,
        "envdVersion": identity.ENVD_VERSION,
        "envdAccessToken": t.envd(row.id),
        "trafficAccessToken": t.traffic(row.id),
        "domain": domain(request),
        "alias": row.template,
    }


def detail(request: Request, row: ComputerRow, with_token: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "templateID": row.template,
        "alias": row.template,
        "sandboxID": identity.sandbox_id(row.id),
        "clientID": identity.CLIENT_ID,
        "startedAt": _iso(row.started_at or row.created_at),
        "endAt": _iso(ends_at(row)),
        "envdVersion": identity.ENVD_VERSION,
        "cpuCount": row.vcpus,
        "memoryMB": row.memory_mib,
        "diskSizeMB": row.disk_gib * 1024,
        "metadata": identity.metadata(row),
        "state": state_of(row),
        "domain": domain(request),
        "lifecycle": lifecycle(row),
    }
    if with_token:
        body["envdAccessToken"] = tokens(request).envd(row.id)
    return body


def metric(row: ComputerRow, sample: Sample) -> dict[str, Any]:
    """One of the usage meter's samples as E2B's `SandboxMetric` (one with no CPU use yet, a
    guest's first, is not one)."""
    at = datetime.fromtimestamp(sample.time, UTC)
    return {
        "timestamp": _iso(at),
        "timestampUnix": int(sample.time),
        "cpuCount": row.vcpus,
        "cpuUsedPct": sample.cpu_percent,
        "memUsed": sample.memory_used,
        "memTotal": sample.memory_total,
        "memCache": sample.memory_cache,
        "diskUsed": sample.disk_used,
        "diskTotal": sample.disk_total,
    }


def lifetime_from_now(row: ComputerRow, timeout: int) -> int:
    """The lifetime (seconds from creation) that ends `timeout` seconds from now."""
    created = row.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    elapsed = (datetime.now(UTC) - created).total_seconds()
    return max(1, math.ceil(elapsed + timeout))


def page_token(offset: int) -> str:
    return base64.urlsafe_b64encode(str(offset).encode()).decode()


def page_offset(token: str | None) -> int:
    if not token:
        return 0
    try:
        return max(0, int(base64.urlsafe_b64decode(token.encode()).decode()))
    except ValueError:
        raise InvalidRequestError("nextToken is not one this server gave") from None


def page_limit(raw: str | None, most: int) -> int:
    try:
        return min(most, max(1, int(raw or most)))
    except ValueError:
        return most

"""`AsyncSanbox`: the async client, and the resource groups hung on it."""

from __future__ import annotations

import builtins
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

import httpx

from ._http import HttpCore
from ._websocket import WebSocketConnector, asgi_connector, websocket_url, websockets_connector
from .computer import AsyncComputer
from .config import resolve_config
from .exec_protocol import ExecStart
from .exec_stream import AsyncExecStream
from .fleet import AsyncFleet
from .paths import segment
from .secrets import AsyncSecrets
from .templates import AsyncPools, AsyncTemplates
from .types import (
    ApiKey,
    AuditRecord,
    ComputerRecord,
    Event,
    HostInfo,
    ImageBuild,
    Org,
    OrgRegions,
    Quota,
    Snapshot,
)
from .usage import AsyncUsage

DEFAULT_TIMEOUT = 60.0

SecretRequests = Sequence[tuple[str, str | None]] | Mapping[str, str | None]
"""Secrets to bind at create: each secret's name and the variable its placeholder goes in."""


class AsyncSanbox:
    """The async client. `url`/`api_key` default to env, then the config file.

    `transport` replaces httpx's network transport (e.g. `httpx.ASGITransport(app)` or
    `httpx.MockTransport`); `ws_connector` replaces the WebSocket connection, and is derived
    from an `httpx.ASGITransport` by itself.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        ws_connector: WebSocketConnector | None = None,
    ) -> None:
        config = resolve_config(url, api_key)
        self.url = config.url
        self.http = HttpCore(config.url, config.api_key, timeout, transport)
        if ws_connector is None and isinstance(transport, httpx.ASGITransport):
            ws_connector = asgi_connector(transport.app)
        self._ws_connector = ws_connector or websockets_connector
        self.computers = AsyncComputers(self)
        self.snapshots = AsyncSnapshots(self)
        self.templates = AsyncTemplates(self)
        self.pools = AsyncPools(self)
        self.secrets = AsyncSecrets(self)
        self.orgs = AsyncOrgs(self)
        self.fleet = AsyncFleet(self)
        self.keys = AsyncKeys(self)
        self.images = AsyncImages(self)
        self.audit = AsyncAudit(self)
        self.usage = AsyncUsage(self)

    async def __aenter__(self) -> AsyncSanbox:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def host(self) -> HostInfo:
        return HostInfo.from_json(await self.http.json("GET", "/v1/host"))

    async def console_link(self) -> str:
        """A one-time URL that opens the web console logged in as this key (two minutes)."""
        found: dict[str, Any] = await self.http.json("POST", "/v1/console/links")
        return str(found["url"])

    async def events(self, after: int | None = None) -> AsyncIterator[Event]:
        """Follow the org's events (Server-Sent Events) until the caller stops.

        `after=ID` first replays the stored events after that id (0: all), so a follower that
        reconnects misses none."""
        params = {"after": after} if after is not None else None
        async with self.http.stream("GET", "/v1/events", params=params, timeout=None) as response:
            data: list[str] = []
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    data.append(line[5:].strip())
                elif not line and data:
                    payload = json.loads("\n".join(data))
                    data = []
                    if isinstance(payload, dict):
                        yield Event.from_json(payload)

    def open_websocket(self, path: str, request: ExecStart) -> AsyncExecStream:
        return AsyncExecStream(*self.websocket_target(path), request)

    def websocket_target(self, path: str) -> tuple[WebSocketConnector, str, dict[str, str]]:
        """The connector, URL and headers (the key) of the API's WebSocket at `path`."""
        headers = {k: v for k, v in self.http.headers.items() if k == "Authorization"}
        return self._ws_connector, websocket_url(self.url, path), headers


class AsyncComputers:
    def __init__(self, client: AsyncSanbox) -> None:
        self._client = client

    async def create(
        self,
        template: str | None = None,
        name: str | None = None,
        vcpus: int | None = None,
        memory_mib: int | None = None,
        disk_gib: int | None = None,
        env: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        wait: bool = True,
        idle_timeout: int | None = None,
        allow: list[str] | None = None,
        from_snapshot: str | None = None,
        secrets: SecretRequests | None = None,
        lifetime: int = 0,
        on_lifetime: str = "stop",
        max_running: int = 0,
        region: str | None = None,
    ) -> AsyncComputer:
        """Create a computer; with `wait=False` it comes back `creating` (poll `refresh()`).

        Left out, `template` is `base` and the size the template's (for `base`: 1 vCPU,
        512 MiB, the image's disk; an org's template restores its ready snapshot only at its
        own size).
        `from_snapshot` (a snapshot's id or name) starts it from that snapshot's disk, and
        resumes its memory and processes if the snapshot kept them (`memory` then says
        `restored`, or `lost` and why); what is left out is then the snapshot's.
        `secrets` binds secrets of the org as it is made: `[("openai", "OPENAI_API_KEY")]` or
        `{"openai": "OPENAI_API_KEY"}`, the variable its placeholder is in (None: in none).
        No session limit unless asked: `lifetime` seconds after its creation it is stopped (or
        deleted, `on_lifetime="delete"`), `max_running` seconds after each start it is stopped.
        `region`: the fleet region it runs in, one the org may use (left out: the org's home).
        """
        if from_snapshot is None:
            template = template or "base"  # the size left out is the template's (or the server's)
        body: dict[str, Any] = {
            "template": template,
            "name": name,
            "vcpus": vcpus,
            "memory_mib": memory_mib,
            "disk_gib": disk_gib,
            "env": env or {},
            "labels": labels or {},
        }
        if idle_timeout is not None:
            body["idle_timeout"] = idle_timeout
        if lifetime or max_running:
            body.update(lifetime=lifetime, on_lifetime=on_lifetime, max_running=max_running)
        if allow is not None:
            body["allow"] = list(allow)
        if from_snapshot is not None:
            body["from_snapshot"] = from_snapshot
        if region is not None:
            body["region"] = region
        if secrets is not None:
            pairs = secrets.items() if isinstance(secrets, Mapping) else secrets
            body["secrets"] = [{"name": secret, "env": var} for secret, var in pairs]
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        data = await self._client.http.json(
            "POST",
            "/v1/computers",
            params={"wait": wait},
            json_body=body,
            headers=headers,
            timeout=600.0 if wait else None,
        )
        return AsyncComputer(self._client, ComputerRecord.from_json(data))

    async def list(
        self, state: str | None = None, labels: dict[str, str] | None = None
    ) -> builtins.list[AsyncComputer]:
        params: builtins.list[tuple[str, str]] = [("state", state)] if state else []
        params += [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        data = await self._client.http.json("GET", "/v1/computers", params=params)
        return [
            AsyncComputer(self._client, ComputerRecord.from_json(c))
            for c in data.get("computers", [])
        ]

    async def get(self, id_or_name: str) -> AsyncComputer:
        data = await self._client.http.json("GET", f"/v1/computers/{segment(id_or_name)}")
        return AsyncComputer(self._client, ComputerRecord.from_json(data))


class AsyncSnapshots:
    """The org's snapshots (`computer.snapshot()` takes one)."""

    def __init__(self, client: AsyncSanbox) -> None:
        self._client = client

    async def list(self) -> builtins.list[Snapshot]:
        data = await self._client.http.json("GET", "/v1/snapshots")
        return [Snapshot.from_json(s) for s in data.get("snapshots", [])]

    async def get(self, id_or_name: str) -> Snapshot:
        path = f"/v1/snapshots/{segment(id_or_name)}"
        return Snapshot.from_json(await self._client.http.json("GET", path))

    async def delete(self, id_or_name: str) -> Snapshot:
        """Delete a snapshot; computers made from it keep working."""
        path = f"/v1/snapshots/{segment(id_or_name)}"
        return Snapshot.from_json(await self._client.http.json("DELETE", path, timeout=600.0))


class AsyncOrgs:
    def __init__(self, client: AsyncSanbox) -> None:
        self._client = client

    async def create(self, name: str) -> Org:
        data = await self._client.http.json("POST", "/v1/orgs", json_body={"name": name})
        return Org.from_json(data)

    async def list(self) -> builtins.list[Org]:
        data = await self._client.http.json("GET", "/v1/orgs")
        return [Org.from_json(o) for o in data.get("orgs", [])]

    async def quota(self, org: str) -> Quota:
        """The org's quota and what it uses now (any key: its own org; host-admin key: any)."""
        path = f"/v1/orgs/{segment(org)}/quota"
        return Quota.from_json(await self._client.http.json("GET", path))

    async def set_quota(
        self,
        org: str,
        running: int | None = None,
        vcpus: int | None = None,
        memory_mib: int | None = None,
        disk_gib: int | None = None,
        snapshots: int | None = None,
    ) -> Quota:
        """Replace the org's quota (host-admin key): None is no limit for that one."""
        body = {
            "running": running,
            "vcpus": vcpus,
            "memory_mib": memory_mib,
            "disk_gib": disk_gib,
            "snapshots": snapshots,
        }
        path = f"/v1/orgs/{segment(org)}/quota"
        return Quota.from_json(await self._client.http.json("PUT", path, json_body=body))

    async def regions(self, org: str) -> OrgRegions:
        """Where the org's computers may run (any key: its own org; host-admin key: any)."""
        path = f"/v1/orgs/{segment(org)}/regions"
        return OrgRegions.from_json(await self._client.http.json("GET", path))

    async def set_regions(
        self, org: str, home: str | None, allowed: builtins.list[str] | None = None
    ) -> OrgRegions:
        """Set the org's home region and the others its computers may ask for (host-admin key)."""
        body = {"home": home, "allowed": list(allowed or [])}
        path = f"/v1/orgs/{segment(org)}/regions"
        return OrgRegions.from_json(await self._client.http.json("PUT", path, json_body=body))


class AsyncImages:
    """The host's image builds (admin key)."""

    def __init__(self, client: AsyncSanbox) -> None:
        self._client = client

    async def list(self) -> builtins.list[ImageBuild]:
        data = await self._client.http.json("GET", "/v1/images")
        return [ImageBuild.from_json(i) for i in data.get("images", [])]

    async def prune(self) -> builtins.list[ImageBuild]:
        """Remove the builds no computer came from and no new computer would get."""
        data = await self._client.http.json("POST", "/v1/images/prune")
        return [ImageBuild.from_json(i) for i in data.get("removed", [])]


class AsyncKeys:
    """API keys (admin key: its org's; host-admin key: every org's)."""

    def __init__(self, client: AsyncSanbox) -> None:
        self._client = client

    async def create(
        self,
        org: str | None = None,
        name: str | None = None,
        admin: bool = False,
        host_admin: bool = False,
        expires_in: int | None = None,
        expires_at: datetime | str | None = None,
    ) -> ApiKey:
        """A new key of `org` (default: the caller's); `.key` holds it, this once. It stops
        working `expires_in` seconds from now or at `expires_at` (aware datetime or ISO 8601)."""
        if isinstance(expires_at, datetime):
            expires_at = expires_at.isoformat()
        body = {
            "org": org,
            "name": name,
            "admin": admin,
            "host_admin": host_admin,
            "expires_in": expires_in,
            "expires_at": expires_at,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return ApiKey.from_json(await self._client.http.json("POST", "/v1/keys", json_body=body))

    async def list(self, org: str | None = None) -> builtins.list[ApiKey]:
        """Keys without the key itself (`prefix` tells them apart), revoked ones included."""
        data = await self._client.http.json("GET", "/v1/keys", params={"org": org})
        return [ApiKey.from_json(k) for k in data.get("keys", [])]

    async def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key: from its next request on it gets `AuthenticationError`."""
        path = f"/v1/keys/{segment(key_id)}"
        return ApiKey.from_json(await self._client.http.json("DELETE", path))


class AsyncAudit:
    """The audit log (admin key: its org's records; host-admin key: every org's)."""

    def __init__(self, client: AsyncSanbox) -> None:
        self._client = client

    async def list(
        self, after: int | None = None, limit: int = 100, org: str | None = None
    ) -> builtins.list[AuditRecord]:
        """Records after the id `after` in order, else the latest `limit`."""
        params = {"after": after, "limit": limit, "org": org}
        data = await self._client.http.json("GET", "/v1/audit", params=params)
        return [AuditRecord.from_json(r) for r in data.get("records", [])]


__all__ = [
    "AsyncAudit",
    "AsyncComputers",
    "AsyncImages",
    "AsyncKeys",
    "AsyncOrgs",
    "AsyncSanbox",
    "AsyncSnapshots",
]

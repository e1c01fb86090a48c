"""The fleet's hosts (host-admin key; docs/fleet.md): `client.fleet.join_token(region)` for
`sanbox host join`, and `client.fleet.hosts()` with their state and lease."""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .paths import segment
from .records import _known
from .types import Snapshot

if TYPE_CHECKING:
    from .client import AsyncSanbox


@dataclass(frozen=True)
class FleetHost:
    """A host of the fleet (docs/fleet.md) and its lease."""

    name: str
    region: str
    address: str
    state: str  # up | suspect | lost | draining | retired
    epoch: int
    lease_until: str
    hypervisor: str
    accel: str
    vcpus: int
    memory_mib: int
    disk_bytes: int
    alloc_vcpus: int = 0
    alloc_memory_mib: int = 0
    alloc_disk_bytes: int = 0
    vm_overhead_mib: int = 0  # what it counts for a new VM's hypervisor (each VM reserves it)
    labels: dict[str, str] = field(default_factory=dict)
    layers: list[str] = field(default_factory=list)  # the template builds it holds

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FleetHost:
        return cls(**_known(cls, data))


class AsyncFleet:
    """The fleet's hosts (host-admin key; docs/fleet.md)."""

    def __init__(self, client: AsyncSanbox) -> None:
        self._client = client

    async def join_token(
        self, region: str, ttl_seconds: float = 3600.0, host: str | None = None
    ) -> str:
        """A one-time token for a new host of `region` to join the fleet (`sanbox host join`),
        or with `host` for that host only (the one way to join again as a host already known)."""
        body: dict[str, object] = {"region": region, "ttl_seconds": ttl_seconds, "host": host}
        data = await self._client.http.json("POST", "/v1/fleet/tokens", json_body=body)
        return str(data["token"])

    async def hosts(self) -> builtins.list[FleetHost]:
        """The fleet's hosts and their leases."""
        data = await self._client.http.json("GET", "/v1/fleet/hosts")
        return [FleetHost.from_json(h) for h in data.get("hosts", [])]

    async def jobs(self) -> dict[str, str | None]:
        """Each singleton job of the control plane (reconciler, idle, deadlines, pools, usage,
        hosts) and the API node that runs it now (None: none at this moment)."""
        data = await self._client.http.json("GET", "/v1/fleet/jobs")
        return {str(j["name"]): j["node"] for j in data.get("jobs", [])}

    async def move_snapshot(
        self, snapshot_id: str, host: str | None = None, idempotency_key: str | None = None
    ) -> Snapshot:
        """Move a snapshot, its saved memory too, to another host of its region (`host`, or the
        best one), checked there and sealed under that host's key. Sent again with the same
        `idempotency_key`, it answers where that move left it (no move again)."""
        path = f"/v1/fleet/snapshots/{segment(snapshot_id)}/move"
        body = {"host": host}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        data = await self._client.http.json(
            "POST", path, json_body=body, headers=headers, timeout=600.0
        )
        return Snapshot.from_json(data)

    async def get(self, name: str) -> FleetHost:
        """One host (`host_not_found` if there is none)."""
        data = await self._client.http.json("GET", f"/v1/fleet/hosts/{segment(name)}")
        return FleetHost.from_json(data)

    async def drain(self, name: str, draining: bool = True) -> FleetHost:
        """Place nothing new on the host (`draining=False`: place on it again)."""
        verb = "drain" if draining else "undrain"
        data = await self._client.http.json("POST", f"/v1/fleet/hosts/{segment(name)}/{verb}")
        return FleetHost.from_json(data)

    async def forget(self, name: str, confirm_dead: bool = False) -> builtins.list[str]:
        """Retire a lost host on your word that it is dead; the ids of the computers it held."""
        body = {"confirm_dead": confirm_dead}
        data = await self._client.http.json(
            "POST", f"/v1/fleet/hosts/{segment(name)}/forget", json_body=body
        )
        return [str(c) for c in data["computers"]]

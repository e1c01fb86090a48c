"""A host reached over the network: the `Host` protocol over its link (link.py)."""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

import httpx

from ...host.door import (
    AgentClient,
    Capabilities,
    ComputerDir,
    ConnectionBudget,
    Disk,
    DiskExport,
    EgressControl,
    Host,
    HostError,
    Image,
    Intercepts,
    Liveness,
    Machine,
    MachineSpec,
    MemoryOutcome,
    OnDenied,
    OrgOf,
    Reach,
    Resolver,
    Room,
    SavedState,
    SnapshotExport,
    SnapshotManifest,
    VmNotRunningError,
)
from . import wire
from .agent import OPERATION
from .carry_routes import DISK_HEADER
from .link import (
    CALL_DEADLINE,
    CALL_TIMEOUT,
    CHUNK,
    MOST_ANSWER,
    HostLink,
    HostUnreachableError,
    link_client,
    why,
)
from .remote_egress import RemoteEgress
from .vm import RemoteVm

log = logging.getLogger(__name__)


class RemoteHost(HostLink):
    """The `Host` protocol over a host's link: each call a request to its host agent; what the
    door answers at once (facts, room, builds, snapshots, each VM's liveness and CPU time) from
    the host's latest report; a computer's guest agent through the host agent's tunnel."""

    # machines -------------------------------------------------------------------------------

    async def _machine(self, data: dict[str, Any]) -> Machine:
        computer_id = str(data["computer_id"])
        vm = RemoteVm(self, computer_id, str(data["isolation"]))
        dial = vm.dial_agent
        agent = await AgentClient.dial(dial, f"{computer_id} on {self.name}", timeout=30.0)
        return Machine(computer_id, ComputerDir(vm.dir), vm, agent, dial=dial)

    def liveness(self, computer_id: str) -> Liveness:
        if not self.reachable or self._report is None:
            return Liveness.UNKNOWN
        seen = self._report["computers"].get(computer_id)
        return Liveness.DEAD if seen is None else Liveness(seen["liveness"])

    async def create(self, spec: MachineSpec, image: Image) -> tuple[Machine, Disk]:
        made = await self.call("create", spec=wire.spec_out(spec), image=wire.image_out(image))
        await self.refresh()
        return await self._machine(made["machine"]), wire.disk_in(made["disk"])

    async def start(self, spec: MachineSpec, image: Image) -> Machine:
        made = await self.call("start", spec=wire.spec_out(spec), image=wire.image_out(image))
        await self.refresh()
        return await self._machine(made)

    async def attach(self, computer_id: str, timeout: float = 10.0) -> Machine | None:
        found = await self.call("attach", computer_id=computer_id)
        if found is None:
            return None
        await self.refresh()  # its liveness is read from the report: one from after the attach
        return await self._machine(found)

    def attach_vm(self, computer_id: str) -> RemoteVm | None:
        seen = self._latest()["computers"].get(computer_id)
        if seen is None or seen["liveness"] == Liveness.DEAD.value:
            return None
        return RemoteVm(self, computer_id, str(seen["isolation"]))

    async def shutdown(self, machine: Machine, timeout: float = 15.0) -> bool:
        with contextlib.suppress(Exception):
            await machine.agent.close()
        clean = bool(await self.call("shutdown", computer_id=machine.computer_id, timeout=timeout))
        await self.refresh()
        return clean

    async def kill(self, computer_id: str) -> None:
        await self.call("kill", computer_id=computer_id)
        await self.refresh()

    async def destroy(self, computer_id: str) -> None:
        await self.call("destroy", computer_id=computer_id)
        await self.refresh()

    # a stopped computer's disk, or a snapshot, to another host: a call makes the files, their
    # bytes stream from the host that has them into the one that takes them

    async def export_disk(self, computer_id: str, image: Image) -> DiskExport:
        made = await self.call("export_disk", computer_id=computer_id, image=wire.image_out(image))
        return DiskExport.of(made)

    async def export_snapshot(self, snapshot_id: str, image: Image) -> SnapshotExport:
        made = await self.call(
            "export_snapshot", snapshot_id=snapshot_id, image=wire.image_out(image)
        )
        return SnapshotExport.of(made)

    async def export_chunks(self, item_id: str, name: str) -> AsyncGenerator[bytes, None]:
        url = f"{self.url}/v1/host/exports/{item_id}/{name}"
        try:
            async with self._http.stream("GET", url) as r:
                if r.status_code != 200:
                    raise await self.refused(f"the export of {name}", r)
                async for data in r.aiter_bytes(CHUNK):
                    yield data
        except httpx.TransportError as exc:
            raise HostUnreachableError(
                f"host {self.name} dropped the transfer: {why(exc)}"
            ) from exc

    async def drop_export(self, item_id: str) -> None:
        await self.call("drop_export", item_id=item_id)

    async def import_disk(
        self,
        computer_id: str,
        export: DiskExport,
        image: Image | None,
        chunks: AsyncIterator[bytes],
    ) -> None:
        meta = {"export": export.out(), "image": None if image is None else wire.image_out(image)}
        await self._take(f"disks/{computer_id}", meta, chunks)

    async def import_snapshot(
        self, snapshot_id: str, export: SnapshotExport, image: Image, chunks: AsyncIterator[bytes]
    ) -> SnapshotManifest:
        meta = {"export": export.out(), "image": wire.image_out(image)}
        made = await self._take(f"snapshots/{snapshot_id}", meta, chunks)
        return wire.manifest_in(made)

    async def _take(self, what: str, meta: dict[str, Any], chunks: AsyncIterator[bytes]) -> Any:
        url, headers = f"{self.url}/v1/host/imports/{what}", {DISK_HEADER: json.dumps(meta)}
        value = await self.put_stream(f"the import of {what}", url, chunks, headers)
        await self.refresh()
        return value

    async def quarantine(self, computer_id: str) -> str:
        return str(await self.call("quarantine", computer_id=computer_id))

    async def pause(self, machine: Machine, spec: MachineSpec, image: Image) -> SavedState:
        with contextlib.suppress(Exception):
            await machine.agent.close()
        saved = await self.call("pause", spec=wire.spec_out(spec), image=wire.image_out(image))
        await self.refresh()
        return wire.saved_in(saved)

    async def resume(self, spec: MachineSpec, image: Image) -> tuple[Machine, MemoryOutcome]:
        made = await self.call("resume", spec=wire.spec_out(spec), image=wire.image_out(image))
        await self.refresh()
        outcome = wire.outcome_in(made["outcome"])
        if outcome is None:
            raise HostError(f"host {self.name}'s resume did not say what happened to memory")
        return await self._machine(made["machine"]), outcome

    def has_saved_memory(self, computer_id: str) -> bool:
        seen = self._latest()["computers"].get(computer_id)
        return bool(seen and seen["saved_memory"])

    async def drop_saved_memory(self, computer_id: str) -> None:
        await self.call("drop_saved_memory", computer_id=computer_id)

    async def grow_disk(self, machine: Machine, size_bytes: int) -> None:
        await self.call("grow_disk", computer_id=machine.computer_id, size_bytes=size_bytes)

    async def console_lines(self, computer_id: str, count: int) -> list[str]:
        return list(await self.call("console_lines", computer_id=computer_id, count=count))

    def cpu_usec(self, computer_id: str) -> int | None:
        seen = (self._report or {}).get("computers", {}).get(computer_id)
        return wire.count(seen.get("cpu_usec")) if isinstance(seen, dict) else None

    # snapshots, copies and forks --------------------------------------------------------------

    async def snapshot(
        self,
        snapshot_id: str,
        computer_id: str,
        machine: Machine | None,
        spec: MachineSpec,
        image: Image,
        memory: bool = False,
        live: bool = True,
    ) -> SnapshotManifest:
        if machine is not None:
            with contextlib.suppress(Exception):  # the host's flow talks to the agent itself
                await machine.agent.close()
        made = await self.call(
            "snapshot",
            snapshot_id=snapshot_id,
            computer_id=computer_id,
            running=machine is not None,
            spec=wire.spec_out(spec),
            image=wire.image_out(image),
            memory=memory,
            live=live,
        )
        await self.refresh()
        return wire.manifest_in(made)

    async def create_from_snapshot(
        self, spec: MachineSpec, image: Image, snapshot_id: str
    ) -> tuple[Machine, MemoryOutcome | None]:
        made = await self.call(
            "create_from_snapshot",
            spec=wire.spec_out(spec),
            image=wire.image_out(image),
            snapshot_id=snapshot_id,
        )
        await self.refresh()
        return await self._machine(made["machine"]), wire.outcome_in(made["outcome"])

    async def fork(
        self,
        machine: Machine | None,
        spec: MachineSpec,
        image: Image,
        new_specs: list[MachineSpec],
        memory: bool = True,
    ) -> list[Machine]:
        if machine is not None:
            with contextlib.suppress(Exception):
                await machine.agent.close()
        made = await self.call(
            "fork",
            running=machine is not None,
            spec=wire.spec_out(spec),
            image=wire.image_out(image),
            memory=memory,
            new_specs=[wire.spec_out(s) for s in new_specs],
        )
        await self.refresh()
        return [await self._machine(m) for m in made]

    async def finish_copy(self, machine: Machine, hostname: str, size_bytes: int) -> None:
        with contextlib.suppress(Exception):
            await machine.agent.close()
        await self.call(
            "finish_copy", computer_id=machine.computer_id, hostname=hostname, size_bytes=size_bytes
        )

    def snapshot_ids(self) -> list[str]:
        return list(self._latest()["snapshots"])

    async def delete_snapshot(self, snapshot_id: str) -> None:
        await self.call("delete_snapshot", snapshot_id=snapshot_id)

    async def delete_snapshots(self, snapshot_ids: list[str]) -> int:
        return int(await self.call("delete_snapshots", snapshot_ids=snapshot_ids))

    async def snapshot_layers(self, snapshot_ids: list[str]) -> dict[str, list[str]]:
        return dict(await self.call("snapshot_layers", snapshot_ids=snapshot_ids))

    async def gc_layers(self) -> list[str]:
        return list(await self.call("gc_layers"))

    # what the host is -------------------------------------------------------------------------

    def driver_facts(self) -> tuple[str, str]:
        report = self._latest()
        return str(report["hypervisor"]), str(report["isolation"])

    def capabilities(self) -> Capabilities:
        return wire.capabilities_in(self._latest()["capabilities"])

    def confinement(self) -> dict[str, object]:
        return dict(self._latest()["confinement"])

    def open_egress(
        self,
        resolver: Resolver,
        on_denied: OnDenied,
        reach: Reach,
        max_connections: int,
        intercepts: Intercepts,
        budget: ConnectionBudget,
        org_of: OrgOf,
    ) -> EgressControl | None:
        """The host's own gateway, driven over the link (remote_egress.py): the resolver, reach,
        caps and budget are the host's own; denials come back through `on_denied`."""
        return RemoteEgress(self, on_denied, intercepts, org_of)

    def reported(self) -> dict[str, Any] | None:
        """The host's latest report while it is fresh (None: unreachable)."""
        return self._report if self.reachable else None

    def storage(self) -> tuple[str, bool]:
        report = self._latest()
        return str(report["storage"]), bool(report["reflink"])

    def admission(self) -> tuple[float, int] | None:
        report = self._latest()
        return float(report.get("disk_overcommit") or 1.0), int(report.get("disk_kept_free") or 0)

    def flat_copy_bytes(self, computer_id: str) -> int:
        return 0  # its host agent admits a snapshot's flat copy itself (fleet/link/room.py)

    def room(self, computer_id: str | None = None, disk: bool = True) -> tuple[Room, Room | None]:
        report = self._latest()["room"]
        ram = wire.room_in(report["ram"])
        if ram is None:
            raise HostUnreachableError(f"host {self.name} reported no room for RAM")
        return ram, wire.room_in(report["disk"]) if disk else None

    def builds(self) -> list[Image]:
        return [wire.image_in(i) for i in self._latest()["builds"]]

    def image(self, template: str, build_id: str | None = None) -> Image:
        """`build_id`'s build while it is there, else the template's current one (the newest
        if none is current), as the host's `image` chooses."""
        mine = [i for i in self.builds() if i.template == template]
        current = set(self._latest()["current"])
        now = next((i for i in mine if i.build_id in current), mine[-1] if mine else None)
        chosen = next((i for i in mine if i.build_id == build_id), now)
        if chosen is None:
            raise HostError(f"template {template!r} is not built on host {self.name}")
        return chosen

    def build(self, build_id: str) -> Image:
        for image in self.builds():
            if image.build_id == build_id:
                return image
        raise HostError(f"build {build_id} is not on host {self.name}")

    def remove_build(self, image: Image) -> None:
        """(Called in a thread: a blocking request; its answer read as a call's, whole within
        `CALL_DEADLINE` and `MOST_ANSWER` bytes.)"""
        what, body = "remove_build", bytearray()
        by = time.monotonic() + CALL_DEADLINE
        with (
            httpx.Client(**link_client(self.tls), timeout=CALL_TIMEOUT) as http,
            http.stream(
                "POST",
                f"{self.url}/v1/host/calls/{what}",
                json={"build_id": image.build_id},
                headers={OPERATION: secrets.token_hex(12)},
                extensions=self.extensions(),
            ) as r,
        ):
            for chunk in r.iter_bytes():
                body += chunk
                if len(body) > MOST_ANSWER or time.monotonic() > by:
                    raise HostUnreachableError(f"host {self.name} sent no answer to {what}")
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):
            raise HostUnreachableError(f"host {self.name} sent no JSON") from None
        self.value(what, r.status_code, answer)

    async def sweep(self, known: set[str]) -> list[str]:
        return list(await self.call("sweep", known=sorted(known)))

    async def disk_error(self, computer_id: str) -> str | None:
        found = await self.call("disk_error", computer_id=computer_id)
        return None if found is None else str(found)

    def computers(self) -> Iterator[str]:
        yield from self._latest()["computers"]


__all__ = ["HostUnreachableError", "RemoteHost", "VmNotRunningError"]


def as_host(remote: RemoteHost) -> Host:
    """A remote host is a `Host` (the type checker holds it to every call of the door)."""
    return remote

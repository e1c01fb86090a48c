"""The values that cross the host's door, as JSON: what a control plane sends a host agent and
what comes back (docs/fleet.md). Paths in answers are the host's own (informational: the control
plane never opens them); an image is sent as its template and build and found again on the host.
An error comes back as its class name, code, message and plain attributes, and is raised again
as that class when the door exports it (else as a HostError with its code)."""

from __future__ import annotations

import re
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from ...host.door import (
    Capabilities,
    Disk,
    HostError,
    Image,
    MachineSpec,
    MemoryOutcome,
    Room,
    SavedState,
    SnapshotManifest,
)

Json = dict[str, Any]
MOST_SAID = 1024  # characters kept of a host's error message (and of each of its attributes)


def count(value: object) -> int | None:
    """A counter a host reports (CPU time, bytes, connections): a whole number from 0 up, or
    None (what else it sent is not believed)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63:
        return value
    return None


def spec_out(spec: MachineSpec) -> Json:
    """A machine spec (its network is the host's to make: never sent)."""
    return {
        "computer_id": spec.computer_id,
        "vcpus": spec.vcpus,
        "memory_mib": spec.memory_mib,
        "disk_gib": spec.disk_gib,
        "hostname": spec.hostname,
    }


def spec_in(data: Json) -> MachineSpec:
    return MachineSpec(
        computer_id=str(data["computer_id"]),
        vcpus=int(data["vcpus"]),
        memory_mib=int(data["memory_mib"]),
        disk_gib=None if data["disk_gib"] is None else int(data["disk_gib"]),
        hostname=str(data["hostname"]),
    )


COMPUTER_ID = re.compile(r"[a-z0-9_-]{1,64}")
SNAPSHOT_ID = re.compile(r"snp_[a-z0-9]{2,60}")
MOST_HELD = 10_000  # computers, snapshots, builds or egresses one host's report may list


def report_in(value: object) -> Json:
    """A host's report, its lists bounded (`ValueError`: it is not one). Each item a host lists
    is looked up in the records (host_sets.py), so a host that lists more than `MOST_HELD` of
    any is not believed, rather than cut: a computer left out would look gone."""
    if not isinstance(value, dict) or "epoch" not in value:
        raise ValueError("it has no epoch")
    egress = value.get("egress")
    if egress is not None and not isinstance(egress, dict):
        raise ValueError("its egress is not an object")
    for name, found, kind in (
        ("computers", value.get("computers", {}), dict),
        ("snapshots", value.get("snapshots", []), list),
        ("builds", value.get("builds", []), list),
        ("egress computers", (egress or {}).get("computers", {}), dict),
    ):
        if not isinstance(found, kind):
            raise ValueError(f"its {name} are not a {kind.__name__}")
        if len(found) > MOST_HELD:
            raise ValueError(f"it lists {len(found)} {name}, more than {MOST_HELD}")
    return value


def image_out(image: Image) -> Json:
    return {
        "template": image.template,
        "build_id": image.build_id,
        "path": str(image.path),
        "kernel_release": image.kernel_release,
        "disk_size_gib": image.disk_size_gib,
    }


def image_in(data: Json) -> Image:
    return Image(
        template=str(data["template"]),
        build_id=str(data["build_id"]),
        path=Path(data["path"]),
        kernel_release=str(data["kernel_release"]),
        disk_size_gib=int(data["disk_size_gib"]),
    )


def disk_out(disk: Disk) -> Json:
    return {"path": str(disk.path), "size_bytes": disk.size_bytes, "method": disk.method}


def disk_in(data: Json) -> Disk:
    return Disk(Path(data["path"]), int(data["size_bytes"]), data["method"])


def outcome_out(outcome: MemoryOutcome | None) -> Json | None:
    return None if outcome is None else {"restored": outcome.restored, "reason": outcome.reason}


def outcome_in(data: Json | None) -> MemoryOutcome | None:
    return None if data is None else MemoryOutcome(bool(data["restored"]), data["reason"])


def saved_in(data: Json) -> SavedState:
    return SavedState(**{f.name: data[f.name] for f in fields(SavedState)})


def manifest_in(data: Json) -> SnapshotManifest:
    return SnapshotManifest(**{f.name: data[f.name] for f in fields(SnapshotManifest)})


def capabilities_in(data: Json) -> Capabilities:
    values = {f.name: data[f.name] for f in fields(Capabilities) if f.name in data}
    values["disk_formats"] = tuple(values["disk_formats"])
    values.setdefault("live_memory_save", False)  # a host agent from before it was said
    values.setdefault("disk_rate", None)  # likewise
    values.setdefault("hypervisor_memory_mib", 0)  # likewise: it counted none
    return Capabilities(**values)


def room_out(room: Room | None) -> Json | None:
    if room is None:
        return None
    out: Json = {"path": str(room.path), "free": room.free, "promised": room.promised}
    if room.overhead or room.hypervisor:  # the RAM dir's: what a new VM's hypervisor counts
        out.update(overhead=room.overhead, hypervisor=room.hypervisor)
    return out


def room_in(data: Json | None) -> Room | None:
    """A host's room as it reports it (a host agent from before it said its hypervisors'
    overhead: none counted, as it admits)."""
    if data is None:
        return None
    overhead, hypervisor = max(0, int(data.get("overhead", 0))), str(data.get("hypervisor", ""))
    return Room(Path(data["path"]), int(data["free"]), int(data["promised"]), overhead, hypervisor)


def plain(value: object) -> Json:
    """A dataclass of plain values (a saved state, a manifest, capabilities) as JSON."""
    return asdict(value)  # type: ignore[call-overload, no-any-return]


# errors -------------------------------------------------------------------------------------


def error_out(exc: BaseException) -> Json:
    attrs = {
        k: v
        for k, v in vars(exc).items()
        if isinstance(v, str | int | float | bool) and not k.startswith("_")
    }
    return {
        "type": type(exc).__name__,
        "code": getattr(exc, "code", "host_error"),
        "message": str(exc),
        "attrs": attrs,
    }


def _host_errors() -> dict[str, type[HostError]]:
    found: dict[str, type[HostError]] = {}
    todo: list[type[HostError]] = [HostError]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return found


def error_in(data: Json) -> HostError:
    """The host's error as its own class (built without its constructor: its message and plain
    attributes set), or a HostError carrying its code. A host is not trusted with the size of
    what is kept of it (its message goes into logs and events): its message, code and each
    attribute are cut to `MOST_SAID` characters, and attributes are plain values only."""
    cls = _host_errors().get(str(data.get("type")), HostError)
    exc = cls.__new__(cls)
    Exception.__init__(exc, _cut(str(data.get("message", ""))))
    attrs = data.get("attrs")
    for key, value in attrs.items() if isinstance(attrs, dict) else ():
        if _plain_attr(key) and isinstance(value, str | int | float | bool):
            setattr(exc, key, _cut(value) if isinstance(value, str) else value)
    if cls is HostError:
        exc.code = _cut(str(data.get("code") or "host_error"))
    return exc


def _plain_attr(key: object) -> bool:
    return isinstance(key, str) and key.isidentifier() and not key.startswith("_")


def _cut(said: str) -> str:
    return said if len(said) <= MOST_SAID else said[: MOST_SAID - 1] + "…"

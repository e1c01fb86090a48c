"""What the fleet's commands print: its hosts (`sanbox host ...`) and what moves between them
(`sanbox move`, `sanbox snapshot move`). As sanbox.cli.views: one function per kind of output,
called by the typer command and by the same command run without typer (sanbox.cli.quick_fleet),
so both print exactly the same."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._output import console, plain
from .views import new_table, said

if TYPE_CHECKING:
    from ..sdk.fleet import FleetHost
    from ..sdk.types import ComputerRecord, Snapshot


def moved(computer: ComputerRecord) -> None:
    """`sanbox move`."""
    said(f"moved {computer.name} [dim]({computer.state})[/]: its disk was copied and verified")


def snapshot_moved(snap: Snapshot) -> None:
    """`sanbox snapshot move`."""
    said(f"moved snapshot {snap.name or snap.id}: checked and sealed on its new host")


def token(value: str) -> None:
    """`sanbox host token`: the join token."""
    console.print(value)


def hosts(found: list[FleetHost]) -> None:
    """`sanbox host ls`."""
    table = new_table(
        "NAME", "REGION", "STATE", "EPOCH", "ADDRESS", "VCPUS", "MEMORY", "LEASE UNTIL"
    )
    for h in found:  # what a host reported of itself: `plain`, never markup
        row = (
            h.name,
            h.region,
            h.state,
            str(h.epoch),
            h.address,
            f"{h.alloc_vcpus}/{h.vcpus}",
            f"{h.alloc_memory_mib}/{h.memory_mib} MiB",
            h.lease_until,
        )
        table.add_row(*map(plain, row))
    console.print(table)


def jobs(held: dict[str, str | None]) -> None:
    """`sanbox host jobs`: each singleton job and the API node that runs it."""
    for name, node in held.items():
        console.print(f"{name:<12} {node or '(none now: another node takes it within seconds)'}")


def host(h: FleetHost) -> None:
    """`sanbox host get`."""
    each = h.vm_overhead_mib
    hypervisor = f" (each VM with {each} MiB for its hypervisor)" if each else ""
    facts = {
        "name": h.name,
        "region": h.region,
        "state": h.state,
        "epoch": h.epoch,
        "address": h.address,
        "hypervisor": f"{h.hypervisor} ({h.accel})",
        "vcpus": f"{h.alloc_vcpus}/{h.vcpus} reserved",
        "memory": f"{h.alloc_memory_mib}/{h.memory_mib} MiB reserved{hypervisor}",
        "disk": f"{h.alloc_disk_bytes}/{h.disk_bytes} bytes reserved",
        "builds": ", ".join(h.layers) or "none",
        "lease until": h.lease_until,
    }
    for label, value in facts.items():
        console.print(plain(f"{label:<12} {value}"))


def drained(h: FleetHost) -> None:
    """`sanbox host drain [--undo]`."""
    console.print(f"host {h.name} is {h.state}")


def forgotten(name: str, held: list[str]) -> None:
    """`sanbox host forget`: the computers the host held."""
    console.print(f"host {name} retired; it held {len(held)} computer(s)")
    for computer_id in held:
        console.print(f"  {computer_id}")

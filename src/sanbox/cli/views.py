"""What the client commands print: one function per kind of output, called by the typer commands
and by the same commands run without typer (sanbox.cli.quick), so both print exactly the same.
No typer here, nor the SDK's client: only its records."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from ._output import console, fail, mib

if TYPE_CHECKING:
    from pathlib import Path

    from rich.table import Table

    from ..sdk.config import ClientConfig
    from ..sdk.records.org import ApiKey
    from ..sdk.types import (
        ComputerRecord,
        Event,
        ImageBuild,
        Org,
        Pool,
        PublishedPort,
        Secret,
        Snapshot,
        Template,
    )
    from ..sdk.usage import UsageReport, UsageTotals


def _table(*headers: str, **options: Any) -> Table:
    from rich.table import Table  # here: only lists need it (~0.005 s for the other commands)

    return Table(*headers, **options)


def print_json(value: object) -> None:
    console.print_json(json.dumps(value))


def said(text: str) -> None:
    """A line of the command's own words (markup allowed, nothing highlighted)."""
    console.print(text, highlight=False)


# -- computers ------------------------------------------------------------------------------------


def computers(records: list[ComputerRecord], as_json: bool) -> None:
    """`sanbox ls`."""
    if as_json:
        print_json([c.to_json() for c in records])
        return
    table = _table("NAME", "ID", "STATE", "TEMPLATE", "CPUS", "MEMORY", "DISK", "CREATED", box=None)
    for c in records:
        colour = {"running": "green", "error": "red"}.get(c.state, "yellow")
        disk = f"{c.disk_gib} GiB" if c.disk_gib is not None else "-"
        table.add_row(
            c.name,
            c.id,
            f"[{colour}]{c.state}[/]",
            c.template,
            str(c.vcpus),
            f"{c.memory_mib} MiB",
            disk,
            c.created_at or "",
        )
    console.print(table)


def outcome(verb: str, computer: ComputerRecord) -> str:
    """What a lifecycle command did with memory, said plainly."""
    if verb in ("stop", "pause") or computer.state != "running" or not computer.memory:
        return {
            "stop": "; memory dropped on purpose, disk kept",
            "pause": "; memory and processes saved, no process runs",
        }.get(verb, "")
    if computer.memory == "restored":
        return "; memory: restored"
    return f"; memory: lost ({computer.memory_reason}), booted fresh on its disk"


def created(
    computer: ComputerRecord, template: str | None, from_snapshot: str | None, as_json: bool
) -> None:
    """`sanbox create`: the computer, or the one-line error if it does not run."""
    if as_json:
        print_json(computer.to_json())
    if computer.state != "running":
        fail("create_failed", f"{computer.name} is {computer.state}: {computer.last_error or '?'}")
    if not as_json:
        told = outcome("create", computer)
        if template is not None and from_snapshot is None and computer.memory:  # an org's own
            why = (computer.memory_reason or "").removeprefix("booted: ")
            told = (
                "; start: restored" if computer.memory == "restored" else f"; start: booted ({why})"
            )
        said(f"[green]running[/] {computer.name} [dim]{computer.id}[/]{told}")


def changed(verb: str, done: str, computer: ComputerRecord) -> None:
    """`sanbox stop|start|restart|pause|resume`."""
    said(f"{done} {computer.name} [dim]({computer.state})[/]{outcome(verb, computer)}")


def event(at: str | None, kind: str, message: str) -> None:
    said(f"[dim]{at or ''}[/] [bold]{kind}[/] {message}")


def events(found: list[Event]) -> None:
    """`sanbox logs`."""
    for e in found:
        event(e.created_at, e.type, e.message)


def console_tail(lines: list[str]) -> None:
    """`sanbox logs --console`."""
    for line in lines:
        console.print(line, markup=False, highlight=False)


# -- snapshots, templates, pools, secrets, orgs, images -------------------------------------------


def snapshots(snaps: list[Snapshot], as_json: bool) -> None:
    """`sanbox snapshot ls`."""
    if as_json:
        print_json([s.to_json() for s in snaps])
        return
    table = _table("NAME", "ID", "OF", "MEMORY", "SIZE", "CREATED", box=None)
    for s in snaps:
        table.add_row(
            s.name or "-",
            s.id,
            s.computer_name,
            "yes" if s.memory else "no",
            mib(s.size_bytes),
            s.created_at or "",
        )
    console.print(table)


def snapshot_taken(snap: Snapshot, source: str, as_json: bool) -> None:
    """`sanbox snapshot create`."""
    if as_json:
        print_json(snap.to_json())
        return
    kept = "disk, memory and processes" if snap.memory else "disk"
    said(
        f"[green]snapshot[/] {snap.name or snap.id} [dim]{snap.id}[/] of {source}: "
        f"{kept}, {mib(snap.size_bytes)}"
    )


def forks(made: list[ComputerRecord], source: str, as_json: bool) -> None:
    """`sanbox fork`."""
    if as_json:
        print_json([f.to_json() for f in made])
        return
    for f in made:
        memory = "; memory: restored" if f.memory == "restored" else ""
        said(f"[green]{f.state}[/] {f.name} [dim]{f.id}[/] forked from {source}{memory}")


def templates(found: list[Template], as_json: bool) -> None:
    """`sanbox template ls`."""
    if as_json:
        print_json([t.to_json() for t in found])
        return
    regions = any(t.region for t in found)  # a fleet's: a template is built per region
    heads = ["NAME", *(["REGION"] if regions else []), "STATE", "BASE", "CPUS", "MEMORY"]
    table = _table(*heads, "READY SNAPSHOT", "BUILT", box=None)
    for t in found:
        table.add_row(
            t.name,
            *([t.region or "-"] if regions else []),
            "built in" if t.builtin else t.state,
            t.base or "-",
            str(t.vcpus),
            f"{t.memory_mib} MiB",
            "yes" if t.ready_snapshot else "-",
            t.updated_at or "",
        )
    console.print(table)


def pools(found: list[Pool], as_json: bool) -> None:
    """`sanbox pool ls`."""
    if as_json:
        print_json([p.to_json() for p in found])
        return
    table = _table("TEMPLATE", "SIZE", "READY", "STARTING", "REFILL", box=None)
    for p in found:
        table.add_row(p.template, str(p.size), str(p.ready), str(p.starting), p.refill)
    console.print(table)


def secrets(found: list[Secret], as_json: bool) -> None:
    """`sanbox secret ls` (what the API says of them: never a value)."""
    if as_json:
        print_json([s.to_json() for s in found])
        return
    table = _table("NAME", "HOSTS", "INJECTS", "VERSION", "UPDATED", box=None)
    for s in found:
        injects = "placeholder only" if s.placeholder_only else (s.header or "-")
        row = (s.name, ", ".join(s.hosts), injects, str(s.version), s.updated_at or "")
        table.add_row(*map(escape, row))
    console.print(table)


def orgs(found: list[Org], as_json: bool) -> None:
    """`sanbox org ls`."""
    if as_json:
        print_json([asdict(o) for o in found])
        return
    table = _table("NAME", "ID", "CREATED", box=None)
    for org in found:
        table.add_row(org.name, org.id, org.created_at or "")
    console.print(table)


def images(builds: list[ImageBuild], as_json: bool) -> None:
    """`sanbox image ls`."""
    if as_json:
        print_json([asdict(b) for b in builds])
        return
    table = _table("TEMPLATE", "BUILD", "KERNEL", "CURRENT", "COMPUTERS", "SIZE", "PRUNE", box=None)
    for b in builds:
        table.add_row(
            b.template,
            b.build_id,
            b.kernel_release,
            "yes" if b.current else "",
            str(b.computers),
            mib(b.bytes),
            "" if b.needed else "yes",
        )
    console.print(table)


# -- network, where the CLI connects --------------------------------------------------------------


def allowlist(name: str, allow: list[str], closed: int = 0, as_json: bool = False) -> None:
    """What computer `name` may reach (`sanbox net show|allow|deny`)."""
    if as_json:
        print(json.dumps({"allow": allow}))
        return
    listed = ", ".join(allow) if allow else "nothing (all outbound traffic is denied)"
    said(f"{name} may reach: {listed}")
    if closed:
        said(f"closed {closed} open connection(s) no longer allowed")


def ports(found: list[PublishedPort], as_json: bool) -> None:
    """`sanbox port ls`."""
    if as_json:
        print(json.dumps([{"port": p.port, "public": p.public, "url": p.url} for p in found]))
        return
    table = _table("PORT", "ACCESS", "URL")
    for p in found:
        table.add_row(str(p.port), "public" if p.public else "private", p.url)
    console.print(table)


def key_status(key: ApiKey, now: datetime | None = None) -> str:
    """`revoked`, `expired` or `active`."""
    if key.revoked_at:
        return "revoked"
    when = datetime.fromisoformat(key.expires_at) if key.expires_at else None
    if when is not None and when <= (now or datetime.now(UTC)):
        return "expired"
    return "active"


def when(value: str | None) -> str:
    """A time as the key commands show it: to the minute."""
    return value[:16].replace("T", " ") if value else "-"


def keys(found: list[ApiKey], as_json: bool) -> None:
    """`sanbox key ls`."""
    if as_json:
        print_json([k.to_json() for k in found])
        return
    table = _table(box=None)
    for column in ("ID", "PREFIX"):
        table.add_column(column, no_wrap=True)
    for column in ("ORG", "NAME", "ROLE", "STATUS", "EXPIRES", "LAST USED"):
        table.add_column(column)
    for key in found:
        role = "host-admin" if key.host_admin else "admin" if key.admin else "-"
        table.add_row(
            key.id,
            f"{key.prefix}…" if key.prefix else "-",
            key.org,
            key.name or "",
            role,
            key_status(key),
            when(key.expires_at),
            when(key.last_used_at),
        )
    console.print(table)


def _usage_cells(u: UsageTotals) -> list[str]:
    cpu = "unmeasured" if u.cpu_seconds is None else f"{u.cpu_seconds:.1f}"
    egress = "-" if u.egress_bytes is None else str(u.egress_bytes)
    return [
        f"{u.running_seconds / 3600:.3f}",
        f"{u.paused_seconds / 3600:.3f}",
        f"{u.vcpu_seconds / 3600:.3f}",
        f"{u.memory_gib_seconds / 3600:.3f}",
        cpu,
        f"{u.disk_gib_hours:.3f}",
        f"{u.snapshot_gib_hours:.3f}",
        egress,
    ]


def usage(found: UsageReport, by: str, as_json: bool) -> None:
    """`sanbox usage` (not `--csv`: the server's CSV is printed as it comes)."""
    if as_json:
        print_json(asdict(found))
        return
    first = {"computer": "COMPUTER", "template": "TEMPLATE", "day": "DAY"}.get(by, by.upper())
    table = _table(
        first,
        "RUNNING H",
        "PAUSED H",
        "VCPU-H",
        "MEM GIB-H",
        "CPU S",
        "DISK GIB-H",
        "SNAP GIB-H",
        "EGRESS B",
        box=None,
        title=f"{found.org}: {found.start} to {found.end}",
    )
    for g in found.groups:
        label = f"{g.name} ({g.key})" if g.name else g.key
        table.add_row(label, *_usage_cells(g.usage))
    table.add_row("[bold]total[/bold]", *_usage_cells(found.total))
    console.print(table)


def link(url: str) -> None:
    """`sanbox console`: the login link, whole on one line (it is clicked or copied)."""
    console.print(url, highlight=False, soft_wrap=True)


def where(path: Path, resolved: ClientConfig) -> None:
    """`sanbox config show`: the file, the URL and the key's first characters."""
    key = resolved.api_key
    masked = f"{key[:8]}…" if key else "(none)"
    said(f"config  {path}")
    said(f"url     {resolved.url}")
    said(f"api_key {masked}")

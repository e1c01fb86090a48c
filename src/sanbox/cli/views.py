"""What the client commands print: one function per kind of output, called by the typer commands
and by the same commands run without typer (sanbox.cli.quick and its kin), so both print exactly
the same. No typer here, nor the SDK's client: only its records. Here: computers, snapshots, the
network, keys and where the CLI connects; the org's other things in sanbox.cli.org_views, the
fleet's in sanbox.cli.fleet_views."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.text import Text

from ._output import console, err_console, fail, mib, plain, safe

if TYPE_CHECKING:
    from pathlib import Path

    from rich.table import Table

    from ..sdk.config import ClientConfig
    from ..sdk.records.org import ApiKey
    from ..sdk.types import ComputerRecord, Event, PublishedPort, Snapshot, ViewLink


def new_table(*headers: str, **options: Any) -> Table:
    """A rich table (loaded here: only lists need it, ~0.005 s for the other commands)."""
    from rich.table import Table

    return Table(*headers, **options)


def print_json(value: object) -> None:
    console.print_json(json.dumps(value))


def said(text: str) -> None:
    """A line of the command's own words (markup allowed, nothing highlighted)."""
    console.print(text, highlight=False)


def copied(size: int) -> None:
    """`cp`'s one line, on stderr."""
    err_console.print(f"copied {size} bytes", highlight=False)


# -- computers ------------------------------------------------------------------------------------


def computers(records: list[ComputerRecord], as_json: bool) -> None:
    """`sanbox ls`."""
    if as_json:
        print_json([c.to_json() for c in records])
        return
    table = new_table(
        "NAME", "ID", "STATE", "TEMPLATE", "CPUS", "MEMORY", "DISK", "CREATED", box=None
    )
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


def updated(computer: ComputerRecord) -> None:
    """`sanbox update`: its idle timeout and session limits as they are now."""
    limits = [f"idle timeout {computer.idle_timeout}s", "no lifetime", "no max running"]
    if computer.lifetime:
        limits[1] = f"lifetime {computer.lifetime}s ({computer.on_lifetime})"
    if computer.max_running:
        limits[2] = f"max running {computer.max_running}s"
    said(f"{computer.name}: {', '.join(limits)}")


def event(at: str | None, kind: str, message: str) -> None:
    """One event of `sanbox logs`: its message may quote a guest (an error, a build's line)."""
    line = Text.assemble((safe(at or ""), "dim"), " ", (safe(kind), "bold"), " ", safe(message))
    console.print(line, highlight=False)


def events(found: list[Event]) -> None:
    """`sanbox logs`."""
    for e in found:
        event(e.created_at, e.type, e.message)


def console_tail(lines: list[str]) -> None:
    """`sanbox logs --console`: the guest's serial console, `safe` (whatever runs in the guest
    writes there, escapes for the terminal that shows it included)."""
    for line in lines:
        console.print(safe(line, lines=True), markup=False, highlight=False)


# -- snapshots ----------------------------------------------------------------------------------


def snapshots(snaps: list[Snapshot], as_json: bool) -> None:
    """`sanbox snapshot ls`."""
    if as_json:
        print_json([s.to_json() for s in snaps])
        return
    table = new_table("NAME", "ID", "OF", "MEMORY", "SIZE", "CREATED", box=None)
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


# -- network and ports ----------------------------------------------------------------------------


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
    table = new_table("PORT", "ACCESS", "URL")
    for p in found:
        table.add_row(str(p.port), "public" if p.public else "private", p.url)
    console.print(table)


def published(port: PublishedPort) -> None:
    """`sanbox port publish`: the URL and who may open it."""
    how = "public" if port.public else "private: a key of its org, or ?token=KEY once"
    said(f"{port.url}  ({how})")


def unpublished(name: str, port: int) -> None:
    """`sanbox port unpublish`."""
    said(f"port {port} of {name} is no longer published")


def view_link(link: ViewLink) -> None:
    """`sanbox port view-link`: the URL alone on stdout (a script takes it), its end on stderr."""
    print(link.url)
    err_console.print(f"view-only until {link.expires_at}", highlight=False)


# -- keys -----------------------------------------------------------------------------------------


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
    table = new_table(box=None)
    for column in ("ID", "PREFIX"):
        table.add_column(column, no_wrap=True)
    for column in ("ORG", "NAME", "ROLE", "STATUS", "EXPIRES", "LAST USED"):
        table.add_column(column)
    for key in found:
        role = "host-admin" if key.host_admin else "admin" if key.admin else "-"
        row = (
            key.id,
            f"{key.prefix}…" if key.prefix else "-",
            key.org,
            key.name or "",  # anything an admin typed
            role,
            key_status(key),
            when(key.expires_at),
            when(key.last_used_at),
        )
        table.add_row(*map(plain, row))
    console.print(table)


def key_created(key: ApiKey, as_json: bool) -> None:
    """`sanbox key create`: the key itself alone on stdout, what it is on stderr."""
    if as_json:
        print_json(key.to_json())
        return
    until = f", expires {when(key.expires_at)} UTC" if key.expires_at else ""
    err_console.print(
        f"created key {key.id} for org {key.org}{until} (shown once):", highlight=False
    )
    console.print(key.key or "", highlight=False, soft_wrap=True)


def key_revoked(key: ApiKey) -> None:
    """`sanbox key revoke`."""
    said(f"revoked key {key.id} ({key.prefix}…) of org {key.org}")


# -- where the CLI connects -----------------------------------------------------------------------


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


def saved(path: Path) -> None:
    """`sanbox config set`."""
    said(f"saved {path}")

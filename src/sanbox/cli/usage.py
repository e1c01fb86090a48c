"""`sanbox usage`: what the org used over a range, by computer, template or day (a host-admin key:
any org's, `--org`); `--csv` for a spreadsheet."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer
from rich.table import Table

from ..sdk import UsageTotals
from . import config
from ._output import console


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.3f}"


def cells(u: UsageTotals) -> list[str]:
    cpu = "unmeasured" if u.cpu_seconds is None else f"{u.cpu_seconds:.1f}"
    egress = "-" if u.egress_bytes is None else str(u.egress_bytes)
    return [
        hours(u.running_seconds),
        hours(u.paused_seconds),
        f"{u.vcpu_seconds / 3600:.3f}",
        f"{u.memory_gib_seconds / 3600:.3f}",
        cpu,
        f"{u.disk_gib_hours:.3f}",
        f"{u.snapshot_gib_hours:.3f}",
        egress,
    ]


def usage(
    start: str | None = typer.Option(None, "--from", help="Start (ISO 8601); default: the month."),
    end: str | None = typer.Option(None, "--to", help="End, exclusive (ISO 8601); default: now."),
    by: str = typer.Option("computer", "--by", help="computer, template or day (UTC)."),
    org: str | None = typer.Option(None, "--org", help="Another org's (host-admin key)."),
    as_csv: bool = typer.Option(False, "--csv", help="Print CSV."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show usage: running and paused hours, vCPU- and GiB-hours, CPU time used, disk GiB-hours."""
    with config.reported(), config.client() as client:
        if as_csv:
            typer.echo(client.usage.csv(start, end, by, org), nl=False)
            return
        found = client.usage.get(start, end, by, org)
    if as_json:
        console.print_json(json.dumps(asdict(found)))
        return
    first = {"computer": "COMPUTER", "template": "TEMPLATE", "day": "DAY"}.get(by, by.upper())
    table = Table(
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
        table.add_row(label, *cells(g.usage))
    table.add_row("[bold]total[/bold]", *cells(found.total))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("usage")(usage)

"""`sanbox usage`: what the org used over a range, by computer, template or day (a host-admin key:
any org's, `--org`); `--csv` for a spreadsheet."""

from __future__ import annotations

import typer

from . import config, org_views


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
            org_views.echoed(client.usage.csv(start, end, by, org))
            return
        found = client.usage.get(start, end, by, org)
    org_views.usage(found, by, as_json)


def register(app: typer.Typer) -> None:
    app.command("usage")(usage)

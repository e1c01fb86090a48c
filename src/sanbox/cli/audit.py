"""`sanbox audit`: who changed what, and how it ended (admin key: its org's records; host-admin
key: every org's)."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from ..sdk import AuditRecord
from . import config
from ._output import console


def outcome(record: AuditRecord) -> str:
    return f"{record.status} {record.code}" if record.code else str(record.status)


def audit(
    limit: int = typer.Option(50, "--limit", "-n", min=1, max=1000, help="How many records."),
    after: int | None = typer.Option(None, "--after", help="Records after this id, in order."),
    org: str | None = typer.Option(None, "--org", help="Only this org's (host-admin key)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show the audit log: the latest records of requests that meant to change something."""
    with config.reported(), config.client() as client:
        records = client.audit.list(after=after, limit=limit, org=org)
    if as_json:
        console.print_json(json.dumps([r.to_json() for r in records]))
        return
    table = Table("ID", "TIME", "ACTOR", "ORG", "ACTION", "TARGET", "OUTCOME", "CLIENT", box=None)
    for r in records:
        table.add_row(
            str(r.id),
            (r.time or "")[:19].replace("T", " "),
            f"{r.key_prefix}…" if r.key_prefix else "-",
            r.org or "-",
            r.action,
            " ".join(f"{k}={v}" for k, v in r.target.items()) or "-",
            outcome(r),
            r.client or "-",
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)

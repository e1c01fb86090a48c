"""`sanbox audit`: who changed what, and how it ended (admin key: its org's records; host-admin
key: every org's)."""

from __future__ import annotations

import typer

from . import config, org_views


def audit(
    limit: int = typer.Option(50, "--limit", "-n", min=1, max=1000, help="How many records."),
    after: int | None = typer.Option(None, "--after", help="Records after this id, in order."),
    org: str | None = typer.Option(None, "--org", help="Only this org's (host-admin key)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show the audit log: the latest records of requests that meant to change something."""
    with config.reported(), config.client() as client:
        records = client.audit.list(after=after, limit=limit, org=org)
    org_views.audit(records, as_json)


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)

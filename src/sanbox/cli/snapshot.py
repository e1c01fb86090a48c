"""`sanbox snapshot create|ls|get|rm` and `sanbox fork`: prepared state from the command line."""

from __future__ import annotations

from typing import Annotated

import typer

from ..sdk import Snapshot, SnapshotNotFoundError
from . import config, fleet_views, views
from ._options import MoveKeyOption
from ._output import busy, show_record

app = typer.Typer(help="Snapshots: a computer's disk, and with --memory its processes, kept.")


@app.command("create")
def create(
    computer: str = typer.Argument(..., help="Computer name or id."),
    memory: bool = typer.Option(
        False, "--memory", help="Keep memory and processes too (computers made from it resume)."
    ),
    name: str | None = typer.Option(None, "--name", "-n", help="A label, unique in the org."),
    as_json: bool = typer.Option(False, "--json", help="Print the snapshot as JSON."),
) -> None:
    """Snapshot a computer; it keeps running (paused at most briefly)."""
    with config.reported(), config.client() as client:
        source = client.computers.get(computer)
        with busy(f"snapshotting {source.name}…"):
            snap = source.snapshot(memory=memory, name=name)
    views.snapshot_taken(snap, source.name, as_json)


@app.command("ls")
def ls(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the org's snapshots."""
    with config.reported(), config.client() as client:
        snaps = client.snapshots.list()
    views.snapshots(snaps, as_json)


@app.command("get")
def get(
    snapshot: str = typer.Argument(..., help="Snapshot name or id."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show one snapshot."""
    with config.reported(), config.client() as client:
        snap: Snapshot = client.snapshots.get(snapshot)
    show_record(snap.to_json(), as_json)


@app.command("rm")
def rm(
    snapshots: Annotated[list[str], typer.Argument(help="Snapshot names or ids.")],
    force: bool = typer.Option(False, "--force", "-f", help="Ignore snapshots that do not exist."),
) -> None:
    """Delete snapshots; computers made from them keep working."""
    with config.reported(), config.client() as client:
        for ref in snapshots:
            try:
                snap = client.snapshots.delete(ref)
            except SnapshotNotFoundError:
                if force:
                    continue
                raise
            views.said(f"deleted {snap.name or snap.id}")


@app.command("move")
def move(
    snapshot: str = typer.Argument(..., help="Snapshot name or id."),
    host: str | None = typer.Option(
        None, "--to", help="The fleet host to move it to (default: the best of its region)."
    ),
    key: MoveKeyOption = None,
) -> None:
    """Move a snapshot, its saved memory too, to another host of its region (host-admin key);
    it is checked there and sealed under that host's key."""
    with config.reported(), config.client() as client:
        snap: Snapshot = client.snapshots.get(snapshot)
        with busy(f"moving snapshot {snap.name or snap.id}…"):
            client.fleet.move_snapshot(snap.id, host, idempotency_key=key)
    fleet_views.snapshot_moved(snap)


def fork(
    computer: str = typer.Argument(..., help="Computer name or id (running, paused or stopped)."),
    count: int = typer.Option(1, "--count", "-c", min=1, max=16, help="How many forks (1-16)."),
    name: str | None = typer.Option(
        None, "--name", "-n", help="The fork's name, or the prefix of several (NAME-1..N)."
    ),
    region: str | None = typer.Option(
        None, "--region", help="Forks run in their source's region: another is refused."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the forks as JSON."),
) -> None:
    """Make COUNT new computers that start where COMPUTER is now, each its own identity."""
    with config.reported(), config.client() as client:
        source = client.computers.get(computer)
        with busy(f"forking {source.name} ×{count}…"):
            forks = source.fork(count=count, name=name, region=region)
    views.forks([f.record for f in forks], source.name, as_json)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="snapshot")
    root.command("fork")(fork)


__all__ = ["register"]

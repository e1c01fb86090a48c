"""`sanbox org create|ls|quota` and `sanbox key create|ls|revoke`: admin-key commands (an admin key
manages its own org's keys; a host-admin key every org, and makes orgs)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from . import config, org_views, views
from ._output import fail
from .grammars import parse_duration, parse_limit

org_app = typer.Typer(help="Organisations (admin key).", no_args_is_help=True)
key_app = typer.Typer(help="API keys (admin key).", no_args_is_help=True)


@org_app.command("create")
def org_create(name: str = typer.Argument(..., help="Org name.")) -> None:
    """Create an organisation (host-admin key)."""
    with config.reported(), config.client() as client:
        org = client.orgs.create(name)
    org_views.org_created(org)


@org_app.command("ls")
def org_ls(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List organisations (a host-admin key sees all, an admin key its own)."""
    with config.reported(), config.client() as client:
        orgs = client.orgs.list()
    org_views.orgs(orgs, as_json)


def _limit_option(flag: str, what: str) -> Any:
    return typer.Option(None, flag, help=f"Max {what} (a number, or `none`).")


@org_app.command("quota")
def org_quota(
    org: str = typer.Argument(..., help="Org name."),
    running: str | None = _limit_option("--running", "running computers"),
    vcpus: str | None = _limit_option("--vcpus", "vCPUs of running computers"),
    memory: str | None = _limit_option("--memory", "MiB of memory of running computers"),
    disk: str | None = _limit_option("--disk", "GiB of disk of all computers"),
    snapshots: str | None = _limit_option("--snapshots", "snapshots"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show an org's quota and use; with options, set them (host-admin key; the others kept)."""
    given = {
        "running": running,
        "vcpus": vcpus,
        "memory_mib": memory,
        "disk_gib": disk,
        "snapshots": snapshots,
    }
    try:
        wanted = {name: parse_limit(value) for name, value in given.items()}
    except ValueError as exc:
        fail("invalid_argument", str(exc))
    with config.reported(), config.client() as client:
        quota = client.orgs.quota(org)
        if any(value != "" for value in wanted.values()):
            limits = {k: (quota.limits.get(k) if v == "" else v) for k, v in wanted.items()}
            quota = client.orgs.set_quota(org, **limits)  # type: ignore[arg-type]
    org_views.quota(quota, as_json)


@org_app.command("regions")
def org_regions(
    org: str = typer.Argument(..., help="Org name."),
    home: str | None = typer.Option(
        None, "--home", help="Where its computers run unless they ask (`none`: anywhere)."
    ),
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow", help="Another region its computers may ask for (repeat; `none`: none)."
        ),
    ] = None,
) -> None:
    """Show where an org's computers may run; with options, set it (host-admin key)."""
    with config.reported(), config.client() as client:
        now = client.orgs.regions(org)
        if home is not None or allow is not None:
            new_home = now.home if home is None else (None if home == "none" else home)
            allowed = now.allowed if allow is None else [a for a in allow if a != "none"]
            now = client.orgs.set_regions(org, new_home, allowed)
    org_views.regions(now)


@key_app.command("create")
def key_create(
    org: str | None = typer.Option(None, "--org", help="The org the key acts for [your own]."),
    name: str | None = typer.Option(None, "--name", help="A label for the key."),
    admin: bool = typer.Option(False, "--admin", help="Manage the org's keys, read its audit."),
    host_admin: bool = typer.Option(
        False, "--host-admin", help="Manage every org (host-admin key only)."
    ),
    expires_in: str | None = typer.Option(
        None, "--expires-in", help="Stop working after this long: 90s, 15m, 12h, 30d, 2w."
    ),
    expires_at: str | None = typer.Option(
        None, "--expires-at", help="Stop working at this time (ISO 8601, e.g. 2027-01-31T12:00Z)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Create an API key; the key itself is shown once."""
    seconds = None
    if expires_in is not None:
        try:
            seconds = parse_duration(expires_in)
        except ValueError as exc:
            fail("invalid_argument", str(exc))
    with config.reported(), config.client() as client:
        key = client.keys.create(
            org,
            name=name,
            admin=admin,
            host_admin=host_admin,
            expires_in=seconds,
            expires_at=expires_at,
        )
    views.key_created(key, as_json)


@key_app.command("ls")
def key_ls(
    org: str | None = typer.Option(None, "--org", help="Another org's keys (host-admin key)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List API keys (never the keys themselves: their first characters tell them apart)."""
    with config.reported(), config.client() as client:
        keys = client.keys.list(org)
    views.keys(keys, as_json)


@key_app.command("revoke")
def key_revoke(key_id: str = typer.Argument(..., help="The key's id (key_…).")) -> None:
    """Revoke an API key: from its next request on it is refused."""
    with config.reported(), config.client() as client:
        key = client.keys.revoke(key_id)
    views.key_revoked(key)


def register(app: typer.Typer) -> None:
    app.add_typer(org_app, name="org")
    app.add_typer(key_app, name="key")

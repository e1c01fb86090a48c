"""The fleet's commands without the typer app (sanbox.cli.quick says how, and holds the table of
commands): `move`, `snapshot move` and `host token|ls|jobs|get|drain|forget` (host-admin key).
Each makes the requests the SDK makes for its typer command, in the same order, and prints
through the same functions (sanbox.cli.fleet_views).

Both quote a host's name, and a computer's or snapshot's id, as one path segment (`calls.path`,
the SDK's `fleet._segment`); a host name other than letters, digits and `._~-` is left to the
typer command all the same (sanbox.cli.grammars.is_host_name), as `.` and `..` must be.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import fleet_views
from ._output import busy
from .argv import Args
from .calls import LONG, Api, computer, path, record
from .grammars import parse_duration

if TYPE_CHECKING:
    from ..sdk.fleet import FleetHost


def move(a: Args) -> None:
    api = Api()
    found = computer(api, a["name"])
    with busy(f"moving {found.name}: copying its disk…"):
        where = path("fleet", "computers", found.id, "move")
        data = api.json("POST", where, body={"host": a.value("host")}, timeout=LONG)
    fleet_views.moved(record(data))


def snapshot_move(a: Args) -> None:
    from ..sdk.records.snapshot import Snapshot

    api = Api()
    snap = Snapshot.from_json(api.json("GET", path("snapshots", a["snapshot"])))
    with busy(f"moving snapshot {snap.name or snap.id}…"):
        where = path("fleet", "snapshots", snap.id, "move")
        Snapshot.from_json(api.json("POST", where, body={"host": a.value("host")}, timeout=LONG))
    fleet_views.snapshot_moved(snap)


def _host(data: Any) -> FleetHost:
    from ..sdk.fleet import FleetHost  # its module loads every record (~0.017 s): only here

    return FleetHost.from_json(data)


def host_token(a: Args) -> None:
    seconds = parse_duration(a.value("ttl") or "1h")
    body = {"region": a.value("region"), "ttl_seconds": float(seconds), "host": a.value("host")}
    fleet_views.token(str(Api().json("POST", "/v1/fleet/tokens", body=body)["token"]))


def host_ls(a: Args) -> None:
    data = Api().json("GET", "/v1/fleet/hosts")
    fleet_views.hosts([_host(h) for h in data.get("hosts", [])])


def host_jobs(a: Args) -> None:
    data = Api().json("GET", "/v1/fleet/jobs")
    fleet_views.jobs({str(j["name"]): j["node"] for j in data.get("jobs", [])})


def host_get(a: Args) -> None:
    fleet_views.host(_host(Api().json("GET", path("fleet", "hosts", a["name"]))))


def host_drain(a: Args) -> None:
    verb = "undrain" if a.flag("undo") else "drain"
    data = Api().json("POST", path("fleet", "hosts", a["name"], verb))
    fleet_views.drained(_host(data))


def host_forget(a: Args) -> None:
    where = path("fleet", "hosts", a["name"], "forget")
    data = Api().json("POST", where, body={"confirm_dead": True})
    fleet_views.forgotten(a["name"], [str(c) for c in data["computers"]])

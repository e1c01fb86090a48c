"""`sanbox net show|allow|deny` and `sanbox port ls|publish|unpublish|view-link` without the typer
app (sanbox.cli.quick says how, and holds the table of commands): each makes the requests the
SDK makes for its typer command (sanbox.cli.network), in the same order, and prints through the
same functions (sanbox.cli.views)."""

from __future__ import annotations

from . import views
from .argv import Args
from .calls import Api, computer, path


def _allowlist(api: Api, computer_id: str) -> list[str]:
    """`computer.allowlist()`."""
    data = api.json("GET", path("computers", computer_id, "network"))
    return [str(r) for r in data.get("allow", [])]


def _set_allowlist(api: Api, computer_id: str, allow: list[str]) -> int:
    """`computer.set_allowlist(allow)`: how many open connections it closed."""
    body = {"allow": allow}
    data = api.json("PUT", path("computers", computer_id, "network"), body=body)
    return int(data.get("closed_flows", 0))


def net_show(a: Args) -> None:
    api = Api()
    found = computer(api, a["name"])
    views.allowlist(a["name"], _allowlist(api, found.id), as_json=a.flag("json"))


def net_allow(a: Args) -> None:
    api = Api()
    found = computer(api, a["name"])
    current = _allowlist(api, found.id)
    closed = _set_allowlist(api, found.id, current + [r for r in a.rest if r not in current])
    views.allowlist(a["name"], _allowlist(api, found.id), closed)


def net_deny(a: Args) -> None:
    api = Api()
    found = computer(api, a["name"])
    kept = [r for r in _allowlist(api, found.id) if r not in a.rest]
    closed = _set_allowlist(api, found.id, kept)
    views.allowlist(a["name"], _allowlist(api, found.id), closed)


def port_ls(a: Args) -> None:
    from ..sdk.records.computer import PublishedPort

    api = Api()
    found = computer(api, a["name"])
    data = api.json("GET", path("computers", found.id, "ports"))
    views.ports([PublishedPort.from_json(p) for p in data.get("ports", [])], a.flag("json"))


def port_publish(a: Args) -> None:
    from ..sdk.records.computer import PublishedPort

    api = Api()
    found = computer(api, a["name"])
    body = {"port": a.numbers["port"], "public": a.flag("public")}
    data = api.json("POST", path("computers", found.id, "ports"), body=body)
    views.published(PublishedPort.from_json(data))


def port_unpublish(a: Args) -> None:
    api = Api()
    port = a.numbers["port"]
    api.request("DELETE", path("computers", computer(api, a["name"]).id, "ports", str(port)))
    views.unpublished(a["name"], port)


def port_view_link(a: Args) -> None:
    from ..sdk.records.computer import ViewLink

    api = Api()
    found = computer(api, a["name"])
    expires_in = a.number("expires_in")
    body = {} if expires_in is None else {"expires_in": expires_in}
    where = path("computers", found.id, "ports", str(a.numbers["port"]), "view-link")
    views.view_link(ViewLink.from_json(api.json("POST", where, body=body)))

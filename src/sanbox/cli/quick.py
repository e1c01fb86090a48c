"""The common client commands without the typer app: `ls`, `get`, `create`, `stop` and the other
lifecycle verbs, `rm`, `logs`, `snapshot ls|get|create|rm`, `fork`, `template ls|get`, `pool ls`,
`secret ls|get`, `org ls`, `image ls`, `net show`, `port ls`, `console`, `config show`.

Loading typer (which loads pydantic to convert a command's parameters), every command's module
and httpx costs ~0.2 s before a command that takes the server a few milliseconds. Each command
here reads its argv in its plain forms (sanbox.cli.argv: anything else, `--help` or a mistake,
is the typer app's), makes the requests the SDK makes for it (sanbox.cli.calls) and prints
through the same functions as the typer command (sanbox.cli.views), so it says and does the same.
Records are imported by the commands that read them (sanbox.sdk.records: each costs ~1 ms to
define, a computer's ~5 ms with its events and ports).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..sdk.config import config_path, resolve_config
from ..sdk.errors import ComputerNotFoundError, SnapshotNotFoundError
from . import grammars, views
from ._output import busy, show_record
from .argv import Args, Grammar, read
from .calls import LONG, Api, path

if TYPE_CHECKING:
    from ..sdk.records.computer import ComputerRecord


@dataclass(frozen=True)
class Command:
    grammar: Grammar
    run: Callable[[Args], None]


def find(argv: list[str]) -> tuple[Command, Args] | None:
    """The command `argv` (after `sanbox`) runs and its arguments, or None: the typer app's."""
    for words in (2, 1):
        command = COMMANDS.get(tuple(argv[:words]))
        if command is not None:
            args = read(argv[words:], command.grammar)
            return None if args is None else (command, args)
    return None


def run(command: Command, args: Args) -> int:
    """Run it; its exit status. A `SanboxError` propagates (the caller reports it as the typer
    app's commands do); an interrupt and a closed stdout end it as typer ends a command: 130, and
    1 without a traceback."""
    try:
        command.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 1
    return 0


# -- computers ------------------------------------------------------------------------------------


def _record(data: Any) -> ComputerRecord:
    from ..sdk.records.computer import ComputerRecord

    return ComputerRecord.from_json(data)


def _computer(api: Api, ref: str) -> ComputerRecord:
    return _record(api.json("GET", path("computers", ref)))


def _ls(a: Args) -> None:
    state = a.value("state")
    params = [("state", state)] if state else []
    params += [("label", f"{k}={v}") for k, v in a.pairs("label").items()]
    data = Api().json("GET", "/v1/computers", params=params)
    views.computers([_record(c) for c in data.get("computers", [])], a.flag("json"))


def _get(a: Args) -> None:
    show_record(_computer(Api(), a["name"]).to_json(), a.flag("json"))


def _create(a: Args) -> None:
    template, from_snapshot = a.value("template"), a.value("from_snapshot")
    body: dict[str, object] = {
        "template": (template or "base") if from_snapshot is None else template,
        "name": a.value("name"),
        "vcpus": a.number("cpus"),
        "memory_mib": a.number("memory"),
        "disk_gib": a.number("disk"),
        "env": a.pairs("env"),
        "labels": a.pairs("label"),
    }
    if (idle_timeout := a.number("idle_timeout")) is not None:
        body["idle_timeout"] = idle_timeout
    lifetime, max_running = a.number("lifetime") or 0, a.number("max_running") or 0
    if lifetime or max_running:
        on_lifetime = a.value("on_lifetime")
        body.update(
            lifetime=lifetime,
            max_running=max_running,
            on_lifetime="stop" if on_lifetime is None else on_lifetime,
        )
    if from_snapshot is not None:
        body["from_snapshot"] = from_snapshot
    if (region := a.value("region")) is not None:
        body["region"] = region
    if secrets := a.all("secret"):
        named = (s.partition("=") for s in secrets)
        body["secrets"] = [{"name": name, "env": env or None} for name, _, env in named]
    with busy(f"creating from {from_snapshot or template or 'base'}…"):
        data = Api().json("POST", "/v1/computers", params={"wait": True}, body=body, timeout=LONG)
    views.created(_record(data), template, from_snapshot, a.flag("json"))


def _lifecycle(verb: str, done: str) -> Callable[[Args], None]:
    def lifecycle(a: Args) -> None:
        api = Api()
        computer = _computer(api, a["name"])
        with busy(f"{verb} {computer.name}…"):
            data = api.json("POST", path("computers", computer.id, verb), timeout=LONG)
        views.changed(verb, done, _record(data))

    return lifecycle


def _rm(a: Args) -> None:
    api = Api()
    for name in a.rest:
        try:
            computer = _computer(api, name)
        except ComputerNotFoundError:
            if a.flag("force"):
                continue
            raise
        with busy(f"deleting {computer.name}…"):
            data = api.json("DELETE", path("computers", computer.id), timeout=LONG)
        views.said(f"deleted {_record(data).name}")


def _logs(a: Args) -> None:
    from ..sdk.records.computer import Event

    api = Api()
    computer = _computer(api, a["name"])
    if a.flag("console"):
        lines = a.number("lines")
        params = {"lines": 100 if lines is None else lines}
        data = api.json("GET", path("computers", computer.id, "console"), params=params)
        views.console_tail([str(line) for line in data.get("lines", [])])
        return
    data = api.json("GET", path("computers", computer.id, "events"))
    views.events([Event.from_json(e) for e in data.get("events", [])])


# -- snapshots and forks --------------------------------------------------------------------------


def _snapshot_ls(a: Args) -> None:
    from ..sdk.records.snapshot import Snapshot

    data = Api().json("GET", "/v1/snapshots")
    views.snapshots([Snapshot.from_json(s) for s in data.get("snapshots", [])], a.flag("json"))


def _snapshot_get(a: Args) -> None:
    from ..sdk.records.snapshot import Snapshot

    snap = Snapshot.from_json(Api().json("GET", path("snapshots", a["snapshot"])))
    show_record(snap.to_json(), a.flag("json"))


def _snapshot_create(a: Args) -> None:
    from ..sdk.records.snapshot import Snapshot

    api = Api()
    source = _computer(api, a["computer"])
    body = {"memory": a.flag("memory"), "name": a.value("name")}
    with busy(f"snapshotting {source.name}…"):
        data = api.json("POST", path("computers", source.id, "snapshots"), body=body, timeout=LONG)
    views.snapshot_taken(Snapshot.from_json(data), source.name, a.flag("json"))


def _snapshot_rm(a: Args) -> None:
    from ..sdk.records.snapshot import Snapshot

    api = Api()
    for ref in a.rest:
        try:
            snap = Snapshot.from_json(api.json("DELETE", path("snapshots", ref), timeout=LONG))
        except SnapshotNotFoundError:
            if a.flag("force"):
                continue
            raise
        views.said(f"deleted {snap.name or snap.id}")


def _fork(a: Args) -> None:
    api = Api()
    source = _computer(api, a["computer"])
    count = a.number("count") or 1
    body: dict[str, object] = {"count": count, "name": a.value("name")}
    if (region := a.value("region")) is not None:
        body["region"] = region
    with busy(f"forking {source.name} ×{count}…"):
        data = api.json("POST", path("computers", source.id, "fork"), body=body, timeout=LONG)
    made = [_record(c) for c in data.get("computers", [])]
    views.forks(made, source.name, a.flag("json"))


# -- the org's other things, where the CLI connects -----------------------------------------------


def _template_ls(a: Args) -> None:
    from ..sdk.records.template import Template

    data = Api().json("GET", "/v1/templates")
    views.templates([Template.from_json(t) for t in data.get("templates", [])], a.flag("json"))


def _template_get(a: Args) -> None:
    from ..sdk.records.template import Template

    found = Template.from_json(Api().json("GET", path("templates", a["template"])))
    show_record(found.to_json(), a.flag("json"))


def _pool_ls(a: Args) -> None:
    from ..sdk.records.template import Pool

    data = Api().json("GET", "/v1/pools")
    views.pools([Pool.from_json(p) for p in data.get("pools", [])], a.flag("json"))


def _secret_ls(a: Args) -> None:
    from ..sdk.records.secret import Secret

    data = Api().json("GET", "/v1/secrets")
    views.secrets([Secret.from_json(s) for s in data.get("secrets", [])], a.flag("json"))


def _secret_get(a: Args) -> None:
    from ..sdk.records.secret import Secret

    found = Secret.from_json(Api().json("GET", path("secrets", a["name"])))
    show_record(found.to_json(), a.flag("json"))


def _org_ls(a: Args) -> None:
    from ..sdk.records.org import Org

    data = Api().json("GET", "/v1/orgs")
    views.orgs([Org.from_json(o) for o in data.get("orgs", [])], a.flag("json"))


def _key_ls(a: Args) -> None:
    from ..sdk.records.org import ApiKey

    data = Api().json("GET", "/v1/keys", params={"org": a.value("org")})
    views.keys([ApiKey.from_json(k) for k in data.get("keys", [])], a.flag("json"))


def _usage(a: Args) -> None:
    from ..sdk.usage import UsageReport

    by = a.value("by") or "computer"
    params = {"from": a.value("from"), "to": a.value("to"), "group_by": by, "org": a.value("org")}
    found = UsageReport.from_json(Api().json("GET", "/v1/usage", params=params))
    views.usage(found, by, a.flag("json"))


def _image_ls(a: Args) -> None:
    from ..sdk.records.host import ImageBuild

    data = Api().json("GET", "/v1/images")
    views.images([ImageBuild.from_json(i) for i in data.get("images", [])], a.flag("json"))


def _net_show(a: Args) -> None:
    api = Api()
    computer = _computer(api, a["name"])
    data = api.json("GET", path("computers", computer.id, "network"))
    views.allowlist(a["name"], [str(r) for r in data.get("allow", [])], as_json=a.flag("json"))


def _port_ls(a: Args) -> None:
    from ..sdk.records.computer import PublishedPort

    api = Api()
    computer = _computer(api, a["name"])
    data = api.json("GET", path("computers", computer.id, "ports"))
    views.ports([PublishedPort.from_json(p) for p in data.get("ports", [])], a.flag("json"))


def _console(a: Args) -> None:
    url = str(Api().json("POST", "/v1/console/links")["url"])
    views.link(url)
    if a.flag("open"):
        import webbrowser

        webbrowser.open(url)


def _config_show(a: Args) -> None:
    views.where(config_path(), resolve_config())


COMMANDS: dict[tuple[str, ...], Command] = {
    ("ls",): Command(grammars.LS, _ls),
    ("key", "ls"): Command(grammars.KEY_LS, _key_ls),
    ("usage",): Command(grammars.USAGE, _usage),
    ("get",): Command(grammars.shown("name"), _get),
    ("create",): Command(grammars.CREATE, _create),
    ("stop",): Command(grammars.ONE, _lifecycle("stop", "stopped")),
    ("start",): Command(grammars.ONE, _lifecycle("start", "started")),
    ("restart",): Command(grammars.ONE, _lifecycle("restart", "restarted")),
    ("pause",): Command(grammars.ONE, _lifecycle("pause", "paused")),
    ("resume",): Command(grammars.ONE, _lifecycle("resume", "resumed")),
    ("rm",): Command(grammars.removed("names"), _rm),
    ("logs",): Command(grammars.LOGS, _logs),
    ("snapshot", "ls"): Command(grammars.LISTED, _snapshot_ls),
    ("snapshot", "get"): Command(grammars.shown("snapshot"), _snapshot_get),
    ("snapshot", "create"): Command(grammars.SNAPSHOT_CREATE, _snapshot_create),
    ("snapshot", "rm"): Command(grammars.removed("snapshots"), _snapshot_rm),
    ("fork",): Command(grammars.FORK, _fork),
    ("template", "ls"): Command(grammars.LISTED, _template_ls),
    ("template", "get"): Command(grammars.shown("template"), _template_get),
    ("pool", "ls"): Command(grammars.LISTED, _pool_ls),
    ("secret", "ls"): Command(grammars.LISTED, _secret_ls),
    ("secret", "get"): Command(grammars.shown("name"), _secret_get),
    ("org", "ls"): Command(grammars.LISTED, _org_ls),
    ("image", "ls"): Command(grammars.LISTED, _image_ls),
    ("net", "show"): Command(grammars.shown("name"), _net_show),
    ("port", "ls"): Command(grammars.shown("name"), _port_ls),
    ("console",): Command(grammars.CONSOLE, _console),
    ("config", "show"): Command(grammars.NOTHING, _config_show),
}

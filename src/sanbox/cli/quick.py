"""The client commands without the typer app: every one that makes plain requests and
prints what it got. Here the computers' (`ls`, `get`, `create`, `stop` and the other lifecycle
verbs, `update`, `rm`, `logs`), their snapshots' and forks' (`snapshot ls|get|create|rm`,
`fork`), `console` and `config show|set`; the network's and ports' in sanbox.cli.quick_net; the
org's other things (templates, pools, secrets, orgs, keys, usage, the audit log, image builds)
in sanbox.cli.quick_org; the fleet's (`move`, `snapshot move`, `host ...`) in
sanbox.cli.quick_fleet; `cp` where it draws no transfer bar in sanbox.cli.quick_files; `ssh` and
`ssh-config` in sanbox.cli.quick_ssh; and the one table of them all, `COMMANDS`. (`exec`, `shell`
and `ssh-proxy` have a fast path of their own: sanbox.cli.fastpath.) Left to the typer app: what
streams or follows (`cp` with a bar, `logs -f`, `template build|rebuild|logs`), `ssh` with ssh's
own options or a command, writes files of its own (`host join`), works on this machine (`image
build`, `doctor`) or serves (`server`, `mcp`, `host serve`).

Loading typer (which loads pydantic to convert a command's parameters), every command's module
and httpx costs ~0.3 s before a command that takes the server a few milliseconds. Each command
here reads its argv in its plain forms (sanbox.cli.argv: anything else, `--help` or a mistake,
is the typer app's), makes the requests the SDK makes for it (sanbox.cli.calls) and prints
through the same functions as the typer command (sanbox.cli.views and its kin), so it says and
does the same. Records are imported by the commands that read them (sanbox.sdk.records: each
costs ~1 ms to define, a computer's ~5 ms with its events and ports).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from ..sdk.config import config_path, read_config_file, resolve_config, write_config_file
from ..sdk.errors import ComputerNotFoundError, SnapshotNotFoundError
from . import grammars, quick_files, quick_fleet, quick_net, quick_org, views
from ._output import busy, show_record
from .argv import Args, Grammar, read
from .calls import LONG, Api, computer, path, record


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


def _ls(a: Args) -> None:
    state = a.value("state")
    params = [("state", state)] if state else []
    params += [("label", f"{k}={v}") for k, v in a.pairs("label").items()]
    data = Api().json("GET", "/v1/computers", params=params)
    views.computers([record(c) for c in data.get("computers", [])], a.flag("json"))


def _get(a: Args) -> None:
    show_record(computer(Api(), a["name"]).to_json(), a.flag("json"))


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
    views.created(record(data), template, from_snapshot, a.flag("json"))


def _lifecycle(verb: str, done: str) -> Callable[[Args], None]:
    def lifecycle(a: Args) -> None:
        api = Api()
        found = computer(api, a["name"])
        with busy(f"{verb} {found.name}…"):
            data = api.json("POST", path("computers", found.id, verb), timeout=LONG)
        views.changed(verb, done, record(data))

    return lifecycle


def _rm(a: Args) -> None:
    api = Api()
    for name in a.rest:
        try:
            found = computer(api, name)
        except ComputerNotFoundError:
            if a.flag("force"):
                continue
            raise
        with busy(f"deleting {found.name}…"):
            data = api.json("DELETE", path("computers", found.id), timeout=LONG)
        views.said(f"deleted {record(data).name}")


def _update(a: Args) -> None:
    body = {
        "idle_timeout": a.number("idle_timeout"),
        "lifetime": a.number("lifetime"),
        "on_lifetime": a.value("on_lifetime"),
        "max_running": a.number("max_running"),
    }
    sent = {k: v for k, v in body.items() if v is not None}
    api = Api()
    found = computer(api, a["name"])
    views.updated(record(api.json("PATCH", path("computers", found.id), body=sent, timeout=LONG)))


def _logs(a: Args) -> None:
    from ..sdk.records.computer import Event

    api = Api()
    found = computer(api, a["name"])
    if a.flag("console"):
        lines = a.number("lines")
        params = {"lines": 100 if lines is None else lines}
        data = api.json("GET", path("computers", found.id, "console"), params=params)
        views.console_tail([str(line) for line in data.get("lines", [])])
        return
    data = api.json("GET", path("computers", found.id, "events"))
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
    source = computer(api, a["computer"])
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
    source = computer(api, a["computer"])
    count = a.number("count") or 1
    body: dict[str, object] = {"count": count, "name": a.value("name")}
    if (region := a.value("region")) is not None:
        body["region"] = region
    with busy(f"forking {source.name} ×{count}…"):
        data = api.json("POST", path("computers", source.id, "fork"), body=body, timeout=LONG)
    made = [record(c) for c in data.get("computers", [])]
    views.forks(made, source.name, a.flag("json"))


# -- where the CLI connects ----------------------------------------------------------------------


def _console(a: Args) -> None:
    url = str(Api().json("POST", "/v1/console/links")["url"])
    views.link(url)
    if a.flag("open"):
        import webbrowser

        webbrowser.open(url)


def _ssh(a: Args) -> None:
    from . import quick_ssh  # its files' module loads subprocess: only for these two

    quick_ssh.ssh(a)


def _ssh_config(a: Args) -> None:
    from . import quick_ssh

    quick_ssh.ssh_config(a)


def _config_show(a: Args) -> None:
    views.where(config_path(), resolve_config())


def _config_set(a: Args) -> None:
    from .secret_values import api_key

    key = api_key(a.value("api_key"), a.flag("api_key_stdin"))
    settings = read_config_file()
    settings.update((k, v) for k, v in (("url", a.value("url")), ("api_key", key)) if v is not None)
    views.saved(write_config_file(settings))


COMMANDS: dict[tuple[str, ...], Command] = {
    ("ls",): Command(grammars.LS, _ls),
    ("get",): Command(grammars.shown("name"), _get),
    ("create",): Command(grammars.CREATE, _create),
    ("stop",): Command(grammars.ONE, _lifecycle("stop", "stopped")),
    ("start",): Command(grammars.ONE, _lifecycle("start", "started")),
    ("restart",): Command(grammars.ONE, _lifecycle("restart", "restarted")),
    ("pause",): Command(grammars.ONE, _lifecycle("pause", "paused")),
    ("resume",): Command(grammars.ONE, _lifecycle("resume", "resumed")),
    ("update",): Command(grammars.UPDATE, _update),
    ("move",): Command(grammars.MOVE, quick_fleet.move),
    ("rm",): Command(grammars.removed("names"), _rm),
    ("cp",): Command(grammars.COPY, quick_files.cp),
    ("logs",): Command(grammars.LOGS, _logs),
    ("snapshot", "ls"): Command(grammars.LISTED, _snapshot_ls),
    ("snapshot", "get"): Command(grammars.shown("snapshot"), _snapshot_get),
    ("snapshot", "create"): Command(grammars.SNAPSHOT_CREATE, _snapshot_create),
    ("snapshot", "rm"): Command(grammars.removed("snapshots"), _snapshot_rm),
    ("snapshot", "move"): Command(grammars.SNAPSHOT_MOVE, quick_fleet.snapshot_move),
    ("fork",): Command(grammars.FORK, _fork),
    ("net", "show"): Command(grammars.shown("name"), quick_net.net_show),
    ("net", "allow"): Command(grammars.RULES, quick_net.net_allow),
    ("net", "deny"): Command(grammars.RULES, quick_net.net_deny),
    ("port", "ls"): Command(grammars.shown("name"), quick_net.port_ls),
    ("port", "publish"): Command(grammars.PUBLISH, quick_net.port_publish),
    ("port", "unpublish"): Command(grammars.UNPUBLISH, quick_net.port_unpublish),
    ("port", "view-link"): Command(grammars.VIEW_LINK, quick_net.port_view_link),
    ("template", "ls"): Command(grammars.LISTED, quick_org.template_ls),
    ("template", "get"): Command(grammars.TEMPLATE_GET, quick_org.template_get),
    ("template", "rm"): Command(grammars.TEMPLATE_RM, quick_org.template_rm),
    ("template", "prune"): Command(grammars.LISTED, quick_org.template_prune),
    ("pool", "ls"): Command(grammars.LISTED, quick_org.pool_ls),
    ("pool", "set"): Command(grammars.POOL_SET, quick_org.pool_set),
    ("secret", "ls"): Command(grammars.LISTED, quick_org.secret_ls),
    ("secret", "get"): Command(grammars.shown("name"), quick_org.secret_get),
    ("secret", "set"): Command(grammars.SECRET_SET, quick_org.secret_set),
    ("secret", "rm"): Command(grammars.removed("names"), quick_org.secret_rm),
    ("secret", "bind"): Command(grammars.SECRET_BIND, quick_org.secret_bind),
    ("secret", "unbind"): Command(grammars.SECRET_UNBIND, quick_org.secret_unbind),
    ("secret", "bindings"): Command(grammars.shown("computer"), quick_org.secret_bindings),
    ("org", "ls"): Command(grammars.LISTED, quick_org.org_ls),
    ("org", "create"): Command(grammars.ONE, quick_org.org_create),
    ("org", "quota"): Command(grammars.ORG_QUOTA, quick_org.org_quota),
    ("org", "regions"): Command(grammars.ORG_REGIONS, quick_org.org_regions),
    ("key", "ls"): Command(grammars.KEY_LS, quick_org.key_ls),
    ("key", "create"): Command(grammars.KEY_CREATE, quick_org.key_create),
    ("key", "revoke"): Command(grammars.KEY_REVOKE, quick_org.key_revoke),
    ("usage",): Command(grammars.USAGE, quick_org.usage),
    ("audit",): Command(grammars.AUDIT, quick_org.audit),
    ("image", "ls"): Command(grammars.LISTED, quick_org.image_ls),
    ("image", "prune"): Command(grammars.NOTHING, quick_org.image_prune),
    ("host", "token"): Command(grammars.HOST_TOKEN, quick_fleet.host_token),
    ("host", "ls"): Command(grammars.NOTHING, quick_fleet.host_ls),
    ("host", "jobs"): Command(grammars.NOTHING, quick_fleet.host_jobs),
    ("host", "get"): Command(grammars.HOST, quick_fleet.host_get),
    ("host", "drain"): Command(grammars.HOST_DRAIN, quick_fleet.host_drain),
    ("host", "forget"): Command(grammars.HOST_FORGET, quick_fleet.host_forget),
    ("console",): Command(grammars.CONSOLE, _console),
    ("ssh",): Command(grammars.ONE, _ssh),
    ("ssh-config",): Command(grammars.ONE, _ssh_config),
    ("config", "show"): Command(grammars.NOTHING, _config_show),
    ("config", "set"): Command(grammars.CONFIG_SET, _config_set),
}

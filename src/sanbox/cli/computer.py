"""The computer commands: create, ls, get, exec, shell, cp, stop, start, restart, rm, logs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from ..sdk import ComputerNotFoundError
from . import config, fleet_views, views
from ._options import EnvOption, LabelOption, MoveKeyOption, pairs
from ._output import busy, fail, show_record
from .secret import SecretOption, secret_requests
from .template import ensure_type

"""Seconds between polls while `sanbox create` waits; tests set 0."""


def create(
    template: str | None = typer.Option(
        None, "--template", "-t", help="Template to boot (default: base, or the snapshot's)."
    ),
    kind: str | None = typer.Option(
        None,
        "--type",
        help="A computer type (docker, opencode, browser, assistant): its "
        "template, built for the org on first use.",
    ),
    name: str | None = typer.Option(None, "--name", "-n", help="Name (default: generated)."),
    cpus: int | None = typer.Option(None, "--cpus", help="vCPUs (default: 1, or the snapshot's)."),
    idle_timeout: int | None = typer.Option(
        None,
        "--idle-timeout",
        min=0,
        help="Seconds without activity before it is suspended (0 = never; default: template's).",
    ),
    memory: int | None = typer.Option(
        None, "--memory", help="Memory in MiB (default: 512, or the snapshot's)."
    ),
    disk: int | None = typer.Option(None, "--disk", help="Disk in GiB (default: template's)."),
    env: EnvOption = None,
    label: LabelOption = None,
    from_snapshot: str | None = typer.Option(
        None, "--from-snapshot", help="Start from this snapshot (its memory too, if it has it)."
    ),
    secrets: SecretOption = None,
    lifetime: int = typer.Option(
        0, "--lifetime", min=0, help="Seconds after creation to stop it (0 = no limit)."
    ),
    on_lifetime: str = typer.Option(
        "stop", "--on-lifetime", help="At the end of its lifetime: stop or delete."
    ),
    max_running: int = typer.Option(
        0, "--max-running", min=0, help="Seconds of running after each start (0 = no limit)."
    ),
    region: str | None = typer.Option(
        None, "--region", help="The fleet region to run in (default: the org's home region)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the computer as JSON."),
) -> None:
    """Create a computer and wait until it runs."""
    envs, labels = pairs(env, "--env"), pairs(label, "--label")
    bound = secret_requests(secrets)
    if kind is not None:
        if template is not None and template != kind:
            fail("invalid_request", "--type is a name for --template: give one of them")
        template = kind
    source = from_snapshot or template or "base"
    with config.reported(), config.client() as client:
        if kind is not None:
            ensure_type(client, kind)  # its first use in the org: a build, with its progress
        with busy(f"creating from {source}…"):
            # answered once it runs, or with the typed error (a failed create leaves nothing)
            computer = client.computers.create(
                template=template,
                name=name,
                vcpus=cpus,
                memory_mib=memory,
                disk_gib=disk,
                env=envs,
                labels=labels,
                idle_timeout=idle_timeout,
                from_snapshot=from_snapshot,
                secrets=bound,
                lifetime=lifetime,
                on_lifetime=on_lifetime,
                max_running=max_running,
                region=region,
            )
    views.created(computer.record, template, from_snapshot, as_json)


def ls(
    state: str | None = typer.Option(None, "--state", help="Only computers in this state."),
    label: LabelOption = None,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List computers."""
    labels = pairs(label, "--label")
    with config.reported(), config.client() as client:
        computers = client.computers.list(state=state, labels=labels)
    views.computers([c.record for c in computers], as_json)


def get(
    name: str = typer.Argument(..., help="Computer name or id."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show one computer."""
    with config.reported(), config.client() as client:
        record = client.computers.get(name).record.to_json()
    show_record(record, as_json)


def _lifecycle(verb: str, done: str) -> Callable[[str], None]:
    def command(name: str = typer.Argument(..., help="Computer name or id.")) -> None:
        with config.reported(), config.client() as client:
            computer = client.computers.get(name)
            with busy(f"{verb} {computer.name}…"):
                getattr(computer, verb)()
        views.changed(verb, done, computer.record)

    command.__doc__ = f"{verb.capitalize()} a computer."
    return command


def move(
    name: str = typer.Argument(..., help="Computer name or id."),
    host: str | None = typer.Option(
        None, "--to", help="The fleet host to move it to (default: the best of its region)."
    ),
    key: MoveKeyOption = None,
) -> None:
    """Move a stopped computer to another host of its region, its disk copied and verified."""
    with config.reported(), config.client() as client:
        computer = client.computers.get(name)
        with busy(f"moving {computer.name}: copying its disk…"):
            computer.move(host, idempotency_key=key)
    fleet_views.moved(computer.record)


def update(
    name: str = typer.Argument(..., help="Computer name or id."),
    idle_timeout: int | None = typer.Option(
        None, "--idle-timeout", min=0, help="Seconds without activity before suspending; 0 = never."
    ),
    lifetime: int | None = typer.Option(
        None, "--lifetime", min=0, help="Seconds after its creation to stop it; 0 = no limit."
    ),
    on_lifetime: str | None = typer.Option(
        None, "--on-lifetime", help="At the end of its lifetime: stop or delete."
    ),
    max_running: int | None = typer.Option(
        None, "--max-running", min=0, help="Seconds of running after each start; 0 = no limit."
    ),
) -> None:
    """Change a computer's settings (idle timeout, session limits)."""
    if idle_timeout is None and lifetime is None and on_lifetime is None and max_running is None:
        fail("invalid_argument", "give --idle-timeout, --lifetime, --on-lifetime or --max-running")
    with config.reported(), config.client() as client:
        computer = client.computers.get(name).update(
            idle_timeout=idle_timeout,
            lifetime=lifetime,
            on_lifetime=on_lifetime,
            max_running=max_running,
        )
    views.updated(computer.record)


def rm(
    names: Annotated[list[str], typer.Argument(help="Computer names or ids.")],
    force: bool = typer.Option(
        False, "--force", "-f", help="Ignore computers that do not exist (like rm -f)."
    ),
) -> None:
    """Delete computers, running or not (a running one is stopped first); asks nothing."""
    with config.reported(), config.client() as client:
        for name in names:
            try:
                computer = client.computers.get(name)
            except ComputerNotFoundError:
                if force:
                    continue
                raise
            with busy(f"deleting {computer.name}…"):
                computer.delete()
            views.said(f"deleted {computer.name}")


def logs(
    name: str = typer.Argument(..., help="Computer name or id."),
    show_console: bool = typer.Option(False, "--console", help="Show the VM's console tail."),
    lines: int = typer.Option(100, "--lines", "-n", help="Console lines to show."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events."),
) -> None:
    """Show a computer's events (or, with --console, its console log tail)."""
    with config.reported(), config.client() as client:
        computer = client.computers.get(name)
        if show_console:
            views.console_tail(computer.console(lines=lines))
            return
        shown = computer.events()
        views.events(shown)
        if follow:  # from the last one shown: none written meanwhile is missed
            after = max((event.id for event in shown), default=None)
            for event in client.events(after=after):
                if event.computer_id == computer.id:
                    views.event(event.created_at, event.type, event.message)


def register(app: typer.Typer) -> None:
    """Add the computer commands to the top level of `app`."""
    app.command("create")(create)
    app.command("ls")(ls)
    app.command("get")(get)
    app.command("stop")(_lifecycle("stop", "stopped"))
    app.command("start")(_lifecycle("start", "started"))
    app.command("restart")(_lifecycle("restart", "restarted"))
    app.command("pause")(_lifecycle("pause", "paused"))
    app.command("resume")(_lifecycle("resume", "resumed"))
    app.command("update")(update)
    app.command("move")(move)
    app.command("rm")(rm)
    app.command("logs")(logs)


__all__ = ["register"]

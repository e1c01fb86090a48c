"""`sanbox template build|rebuild|ls|get|rm|logs|prune`: templates built from a spec file, per
region on a fleet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from ..sdk import Sanbox, Template, TemplateNotFoundError
from ..sdk.templates import BuildStarted
from ..templates.types import TYPES, UnknownTypeError, type_dir
from . import config, org_views
from ._output import console, err_console, fail, safe, show_record

app = typer.Typer(help="Templates: computers prepared from a spec (sanbox.toml), built once.")


def _print_json(value: object) -> None:
    console.print_json(json.dumps(value))


def _line(record: dict[str, Any]) -> Text | None:
    """A log record as one line of text: what the build said is never markup (a guest's
    `[sanbox]` or `[bold]` is printed as it is) and is `safe` (a step's output is the guest's:
    its terminal escapes are shown, not obeyed)."""
    kind = record.get("type")
    if kind == "output":
        return Text(safe(str(record.get("text", "")), lines=True), style="dim")
    if kind == "step":
        where = f"{record.get('index')}/{record.get('total')} " if record.get("total") else ""
        line = Text.assemble((safe(f"step {where}"), "bold"), safe(str(record.get("description"))))
        return line.append(" (cached)", "green") if record.get("cached") else line
    if kind == "done":
        colour = "green" if record.get("state") == "ready" else "red"
        state = safe(str(record.get("state")))
        return Text.assemble((f"build {state}", colour), ": ", safe(str(record.get("message", ""))))
    return None


def type_folder(kind: str) -> Path:
    """The spec folder of a computer type; a one-line error naming the types otherwise."""
    try:
        return type_dir(kind)
    except UnknownTypeError as exc:
        fail("unknown_type", str(exc))


def ensure_type(client: Sanbox, kind: str) -> None:
    """Build computer type `kind` for the org unless it is built (its first use: minutes)."""
    folder = type_folder(kind)
    try:
        client.templates.get(kind)
        return
    except TemplateNotFoundError:
        pass
    err_console.print(
        f"[bold]{kind}[/] is not built in this org yet: building it once "
        f"(`sanbox template build --type {kind}`)",
        highlight=False,
    )
    started = client.templates.build(folder)
    if started.building:
        _follow(client, started.template.name, quiet=True)


REGION_HELP = "The region of the build (a template is built per region; default: the org's home)."


def _follow(client: Sanbox, name: str, quiet: bool, region: str | None = None) -> Template:
    """Follow the build's log with a progress bar (and its lines unless `quiet`)."""
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}", style="bold", markup=False),  # a step's words
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err_console, transient=True) as progress:
        task = progress.add_task(f"building {name}", total=None)

        def show(record: dict[str, Any]) -> None:
            if record.get("type") == "step" and record.get("total"):
                progress.update(
                    task,
                    total=record["total"],
                    completed=record["index"] - 1,
                    description=safe(f"{name}: {record.get('description')}"),
                )
            elif record.get("type") == "step":
                progress.update(task, description=safe(f"{name}: {record.get('description')}"))
            text = _line(record)
            if text is not None and (not quiet or record.get("type") != "output"):
                progress.console.print(text, highlight=False)

        return client.templates.wait(name, on_record=show, region=region)


@app.command("build")
def build(
    spec: Annotated[
        Path | None, typer.Argument(help="A spec file (sanbox.toml) or its folder.")
    ] = None,
    kind: str | None = typer.Option(
        None, "--type", help=f"Build a computer type instead: {', '.join(TYPES)}."
    ),
    name: str | None = typer.Option(None, "--name", "-n", help="Name it (else the spec's)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only steps and the result."),
    as_json: bool = typer.Option(False, "--json", help="Print the template as JSON at the end."),
    region: str | None = typer.Option(None, "--region", help=REGION_HELP),
) -> None:
    """Build a template: each step runs once and is cached; an unchanged spec is a no-op."""
    if (spec is None) == (kind is None):
        fail("invalid_spec", "give a spec (FILE or DIR) or --type TYPE")
    with config.reported(), config.client() as client:
        source = spec if spec is not None else type_folder(kind or "")
        started = client.templates.build(source, name=name, region=region)
        _built(client, started, quiet, as_json)


@app.command("rebuild")
def rebuild(
    template: str = typer.Argument(..., help="Template name."),
    region: str | None = typer.Option(
        None, "--region", help="Build it in this region (from its build elsewhere if it has none)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only steps and the result."),
    as_json: bool = typer.Option(False, "--json", help="Print the template as JSON at the end."),
) -> None:
    """Build a template again from the spec and files its last build was given (kept by the
    server): what changed upstream (a Debian archive, a base) runs again; in another region,
    this builds it there."""
    with config.reported(), config.client() as client:
        _built(client, client.templates.rebuild(template, region=region), quiet, as_json)


def _built(client: Sanbox, started: BuildStarted, quiet: bool, as_json: bool) -> None:
    """Follow a build that runs to its end, then say what was built."""
    template = started.template
    if started.building:
        template = _follow(client, template.name, quiet or as_json, template.region)
    if as_json:
        _print_json(template.to_json())
        return
    if not started.building:
        console.print(f"template [bold]{template.name}[/] is up to date: nothing to build")
        return
    ready = "ready snapshot: creates restore it" if template.ready_snapshot else "no ready snapshot"
    where = f" in {template.region}" if template.region else ""
    console.print(
        f"template [bold]{template.name}[/] built{where}: {template.steps} step(s), "
        f"{template.cached_steps} reused, {template.build_seconds:.1f}s; {ready}",
        highlight=False,
    )


@app.command("ls")
def ls(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the templates: built-in ones, then the org's."""
    with config.reported(), config.client() as client:
        templates = client.templates.list()
    org_views.templates(templates, as_json)


@app.command("get")
def get(
    template: str = typer.Argument(..., help="Template name."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    region: str | None = typer.Option(None, "--region", help=REGION_HELP),
) -> None:
    """Show one template."""
    with config.reported(), config.client() as client:
        t = client.templates.get(template, region)
    show_record(t.to_json(), as_json)


@app.command("rm")
def rm(
    templates: Annotated[list[str], typer.Argument(help="Template names.")],
    force: bool = typer.Option(False, "--force", "-f", help="Ignore templates that do not exist."),
    region: str | None = typer.Option(None, "--region", help=REGION_HELP),
) -> None:
    """Delete templates (their builds in --region); computers made from them keep working."""
    from ..sdk import TemplateNotFoundError

    with config.reported(), config.client() as client:
        for name in templates:
            try:
                client.templates.delete(name, region)
            except TemplateNotFoundError:
                if not force:
                    raise
                continue
            org_views.template_deleted(name)


@app.command("prune")
def prune(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Delete cached build steps no template stands on (older versions of a spec, deleted
    templates). Every template still rebuilds from all of its own."""
    with config.reported(), config.client() as client:
        pruned = client.templates.prune()
    org_views.cache_pruned(pruned, as_json)


@app.command("logs")
def logs(
    template: str = typer.Argument(..., help="Template name."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep following a running build."),
    as_json: bool = typer.Option(False, "--json", help="Print the log's JSON lines."),
    region: str | None = typer.Option(None, "--region", help=REGION_HELP),
) -> None:
    """The last build's log (a failed build leaves it: this is where to read why)."""
    with config.reported(), config.client() as client:
        for record in client.templates.logs(template, follow=follow, region=region):
            if as_json:
                print(json.dumps(record))
                continue
            text = _line(record)
            if text is not None:
                console.print(text, highlight=False)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="template")

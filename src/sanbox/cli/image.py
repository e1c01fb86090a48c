"""`sanbox image build TEMPLATE` (on this host, with a progress bar); `sanbox image ls|prune`
(through the server, which knows which computers use which build; admin key)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from . import config, org_views
from ._output import console

app = typer.Typer(help="Build and inspect images.", no_args_is_help=True)

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data dir (default $SANBOX_DATA_DIR or /var/lib/sanbox)."),
]


@app.command("build")
def build(
    template: Annotated[str, typer.Argument(help="Template to build.")] = "base",
    data_dir: DataDirOption = None,
    force: Annotated[bool, typer.Option(help="Rebuild even if cached.")] = False,
) -> None:
    """Build TEMPLATE's image (kernel, initramfs, root disk), cached by content hash."""
    from ..host.data.layout import DataDir, default_data_dir
    from ..host.image import STEPS, BuildProgress, ImageBuilder

    builder = ImageBuilder(DataDir(data_dir or default_data_dir()))
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task(f"image {template}", total=len(STEPS))

        def report(p: BuildProgress) -> None:
            label = "cached" if p.cached else p.step
            progress.update(task, completed=p.index, description=f"image {template}: {label}")

        image = builder.build(template, report, force=force)
        progress.update(task, completed=len(STEPS))
    for note in builder.notes:
        console.print(note, highlight=False, soft_wrap=True)
    console.print(f"image [bold]{template}[/] build {image.build_id} at {image.path}")


@app.command("ls")
def ls(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the host's image builds: current or not, used by how many computers, size."""
    with config.reported(), config.client() as client:
        builds = client.images.list()
    org_views.images(builds, as_json)


@app.command("prune")
def prune() -> None:
    """Remove the builds no computer came from and no new computer would get."""
    with config.reported(), config.client() as client:
        removed = client.images.prune()
    org_views.images_pruned(removed)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="image")

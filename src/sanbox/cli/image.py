"""`sanbox image build TEMPLATE`: build a template's image, with a progress bar."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ..host.image import STEPS, BuildProgress, ImageBuilder
from ..host.layout import DataDir, default_data_dir
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
    console.print(f"image [bold]{template}[/] build {image.build_id} at {image.path}")

"""`sanbox cp SRC DST`: copy files between this machine and a computer (NAME:PATH)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from ..sdk.errors import SanboxError
from . import config, views
from ._output import err_console, fail
from .grammars import BIG_FILE, copy_ends, download_target, into_folder, upload_path


def cp(
    src: str = typer.Argument(..., help="Source: LOCAL or NAME:PATH."),
    dst: str = typer.Argument(..., help="Destination: LOCAL or NAME:PATH."),
) -> None:
    """Copy a file between this machine and a computer (one side must be NAME:PATH)."""
    remote_src, remote_dst = copy_ends(src, dst)
    with config.reported(), config.client() as client:
        if remote_dst is not None:
            local = Path(src)
            if not local.is_file():
                fail("invalid_argument", f"{src} is not a file")
            name, where = remote_dst
            files = client.computers.get(name).files
            target = upload_path(local, where)
            try:
                with _progress(local.stat().st_size) as advance:
                    size = files.upload(local, target, progress=advance)
            except SanboxError as exc:  # a folder there, named without its slash: into it
                if exc.code != "is_a_directory" or target != where:
                    raise
                with _progress(local.stat().st_size) as advance:
                    size = files.upload(local, into_folder(local, where), progress=advance)
        else:
            assert remote_src is not None
            name, where = remote_src
            files = client.computers.get(name).files
            total = files.stat(where).size
            with _progress(total) as advance:
                size = files.download(where, download_target(dst, where), progress=advance)
    views.copied(size)


class _progress:
    """A transfer bar for big files on a terminal, nothing for small ones or elsewhere (off a
    terminal rich draws no bar, only an empty line at its end); yields the SDK's callback."""

    def __init__(self, total: int | None) -> None:
        self._bar: Progress | None = None
        if total is not None and total >= BIG_FILE and err_console.is_terminal:
            columns = (BarColumn(), DownloadColumn(), TransferSpeedColumn())
            self._bar = Progress(*columns, console=err_console, transient=True)
            self._task = self._bar.add_task("copy", total=total)

    def __enter__(self) -> Callable[[int, int | None], None] | None:
        if self._bar is None:
            return None
        self._bar.start()
        bar, task = self._bar, self._task
        return lambda done, total: bar.update(task, completed=done, total=total)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def register(app: typer.Typer) -> None:
    app.command("cp")(cp)

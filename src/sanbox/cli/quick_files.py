"""`sanbox cp` without the typer app (sanbox.cli.quick says how, and holds the table of
commands), where no transfer bar would be drawn: a local file under `grammars.BIG_FILE` into a
computer, sent in one request, and a computer's file out when stderr is no terminal, written as
it arrives (`grammars.is_quick_copy_source` decides from the argv alone; the typer command does
the rest). The requests are the SDK's for the typer command, in its order: the computer, then
the upload (`PUT .../files`), or its file's stat and the download (`GET .../files`); the local
file is opened once the download is answered with success, as the SDK opens it."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from ..sdk.errors import SanboxError
from . import views
from .argv import Args
from .calls import LONG, Api, computer, path
from .grammars import copy_ends, download_target, into_folder, upload_path


def cp(a: Args) -> None:
    remote_src, remote_dst = copy_ends(a["src"], a["dst"])
    api = Api()
    if remote_dst is not None:
        local = Path(a["src"])
        name, where = remote_dst
        files = path("computers", computer(api, name).id, "files")
        content, there = local.read_bytes(), upload_path(local, where)
        try:
            data = api.json("PUT", files, params={"path": there}, content=content, timeout=LONG)
        except SanboxError as exc:  # a folder there, named without its slash: into it
            if exc.code != "is_a_directory" or there != where:
                raise
            params = {"path": into_folder(local, where)}
            data = api.json("PUT", files, params=params, content=content, timeout=LONG)
        views.copied(int(data.get("size", 0)) if isinstance(data, dict) else 0)
        return
    assert remote_src is not None
    name, where = remote_src
    target = download_target(a["dst"], where)
    files = path("computers", computer(api, name).id, "files")
    api.json("GET", files + "/stat", params={"path": where})  # its size: for a bar, drawn nowhere
    written = _Written(target)
    try:
        api.request("GET", files, params={"path": where}, timeout=LONG, sink=written.write)
        written.open()  # an empty file is a file too
    finally:
        written.close()
    views.copied(written.size)


class _Written:
    """The local file a download goes to: opened at its first bytes (or at its end, if none)."""

    def __init__(self, target: Path) -> None:
        self.target, self.size = target, 0
        self._file: BinaryIO | None = None

    def open(self) -> BinaryIO:
        if self._file is None:
            self._file = self.target.open("wb")
        return self._file

    def write(self, piece: bytes) -> None:
        self.open().write(piece)
        self.size += len(piece)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

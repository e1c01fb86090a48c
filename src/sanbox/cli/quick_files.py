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

from . import views
from ._output import fail
from .argv import Args
from .calls import LONG, Api, computer, path
from .grammars import remote_file


def cp(a: Args) -> None:
    src, dst = a["src"], a["dst"]
    remote_src, remote_dst = remote_file(src), remote_file(dst)
    if (remote_src is None) == (remote_dst is None):
        fail("invalid_argument", "exactly one of SRC and DST must be NAME:PATH")
    api = Api()
    if remote_dst is not None:
        local = Path(src)
        name, where = remote_dst
        if not where or where.endswith("/"):
            where = f"{where or '/root/'}{local.name}"
        files = path("computers", computer(api, name).id, "files")
        data = api.json(
            "PUT", files, params={"path": where}, content=local.read_bytes(), timeout=LONG
        )
        views.copied(int(data.get("size", 0)) if isinstance(data, dict) else 0)
        return
    assert remote_src is not None
    name, where = remote_src
    target = Path(dst)
    if target.is_dir():
        target = target / Path(where).name
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

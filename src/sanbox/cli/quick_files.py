"""`sanbox cp` without the typer app (sanbox.cli.quick says how, and holds the table of
commands), where no transfer bar would be drawn: a local file under `grammars.BIG_FILE` into a
computer, sent in one request, and a computer's file out when stderr is no terminal, written as
it arrives (`grammars.is_quick_copy_source` decides from the argv alone; the typer command does
the rest). The requests are the SDK's for the typer command, in its order: the computer, then
the upload (`PUT .../files`), or its file's stat and the download (`GET .../files`); the local
file is written whole or not at all, as the SDK writes it (sanbox.sdk.local_file)."""

from __future__ import annotations

from pathlib import Path

from ..sdk.errors import SanboxError
from ..sdk.local_file import WholeFile
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
    with WholeFile(target) as written:  # the file that was there stays if the copy is cut
        api.request("GET", files, params={"path": where}, timeout=LONG, sink=written.write)
    views.copied(written.size)

"""`sanbox ssh NAME` and `sanbox ssh-config NAME` without the typer app (sanbox.cli.quick): the
same files written (sanbox.cli.ssh_files) and the same requests, made as the quick commands make
them (sanbox.cli.calls). `ssh` with ssh's own options or a command is the typer app's."""

from __future__ import annotations

from ..sdk.records.computer import SshAccess
from .argv import Args
from .calls import LONG, Api, computer, path
from .ssh_files import SshFiles, give_config, login, prepare


def _authorize(name: str, public: str) -> tuple[str, str]:
    """The computer, then its key let in (as the SDK's `authorize_ssh_key` asks it)."""
    api = Api()
    found = computer(api, name)
    body = {"public_key": public}
    data = api.json("POST", path("computers", found.id, "ssh-keys"), body=body, timeout=LONG)
    return found.name, SshAccess.from_json(data).host_key


def ssh(a: Args) -> None:
    files = SshFiles.default()
    alias, block = prepare(a["name"], files, _authorize)
    login(files, alias, block, [])


def ssh_config(a: Args) -> None:
    files = SshFiles.default()
    alias, block = prepare(a["name"], files, _authorize)
    give_config(files, alias, block)

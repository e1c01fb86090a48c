"""`sanbox ssh NAME`, `sanbox ssh-config NAME` and `sanbox ssh-proxy NAME`: OpenSSH clients (ssh,
scp, sftp, rsync -e ssh, VS Code Remote-SSH) into a computer.

No port of the computer is reachable: `ssh-proxy` is OpenSSH's `ProxyCommand`, relaying stdin and
stdout over the API's WebSocket (authenticated by the API key) to a fresh `sshd -i` in the guest.
sshd then checks the key pair Sanbox made for this user (`~/.config/sanbox/ssh/id_ed25519`,
beside the CLI's config file) and installed in the computer, and the client checks the
computer's host key strictly against the known_hosts file Sanbox keeps next to it.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from . import config
from .ssh_files import SshFiles, give_config, login, prepare
from .ssh_relay import proxy


def _authorize(name: str, public: str) -> tuple[str, str]:
    """Through the SDK: the computer, then its key let in."""

    async def authorized() -> tuple[str, str]:
        async with config.async_client() as client:
            computer = await client.computers.get(name)
            access = await computer.authorize_ssh_key(public)  # wakes a suspended computer
        return computer.name, access.host_key

    return asyncio.run(authorized())


# -- commands -------------------------------------------------------------------------------------


def ssh_config(name: str = typer.Argument(..., help="Computer name or id.")) -> None:
    """Write (and print) an OpenSSH config block for a computer, for `ssh sanbox-NAME`, scp,
    sftp, rsync or VS Code Remote-SSH once `~/.ssh/config` starts with the Include line this
    prints on stderr (at the top: ssh takes the first value it meets, and a `Host *` before the
    block would forward your agent to the guest). Makes your Sanbox SSH key if there is none and
    lets it log in as root."""
    files = SshFiles.default()
    with config.reported():
        alias, block = prepare(name, files, _authorize)
    give_config(files, alias, block)


def ssh(
    name: Annotated[str, typer.Argument(help="Computer name or id.")],
    args: Annotated[
        list[str] | None, typer.Argument(help="ssh's options and a command (after --).")
    ] = None,
) -> None:
    """Log in to a computer with OpenSSH (`ssh`): `sanbox ssh box`, `sanbox ssh box -- -L
    8080:localhost:8080`, `sanbox ssh box -- uname -a`."""
    files = SshFiles.default()
    with config.reported():
        alias, block = prepare(name, files, _authorize)
    login(files, alias, block, args or [])


def ssh_proxy(name: str = typer.Argument(..., help="Computer name or id.")) -> None:
    """Relay stdin and stdout to a fresh sshd in a computer: OpenSSH's ProxyCommand (the block
    `sanbox ssh-config` prints runs it). Not for typing into."""
    with config.reported():
        asyncio.run(proxy(config.async_client(), name))


def register(app: typer.Typer) -> None:
    app.command("ssh", context_settings={"ignore_unknown_options": True})(ssh)
    app.command("ssh-config")(ssh_config)
    app.command("ssh-proxy")(ssh_proxy)

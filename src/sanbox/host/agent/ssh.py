"""SSH into the guest through the agent (see ``sanbox.guest.ssh``): a byte stream to a fresh
``sshd -i``, the host key, a new host key, and the keys root may log in with."""

from __future__ import annotations

from . import reply
from .channel import Requests
from .tcp import TcpStream


class Ssh:
    def __init__(self, client: Requests) -> None:
        self._client = client

    async def connect(self, env: dict[str, str] | None = None) -> TcpStream:
        """A new sshd in the guest, its stdin and stdout as a byte stream (the same shape as a
        ``tcp`` stream): write what an SSH client sends, read what sshd answers. ``env`` is set
        in every session of the connection."""
        channel = await self._client.open("ssh", {"env": env} if env else {})
        return await TcpStream.connected(channel, ready="started")

    async def host_key(self) -> str:
        """The guest's public host key line (``ssh-ed25519 AAAA… sanbox``), made on first use."""
        body = await self._client.call("control", {"op": "ssh_host_key"})
        return reply.text(body.get("public_key"), "host key")

    async def new_host_key(self) -> str:
        """Delete the guest's host keys and make a new one (a new SSH identity, for a computer
        copied from another); returns the new public key line."""
        body = await self._client.call("control", {"op": "ssh_new_host_key"})
        return reply.text(body.get("public_key"), "host key")

    async def authorize(self, public_key: str) -> bool:
        """Let ``public_key`` log in as root; False if it already could."""
        body = await self._client.call("control", {"op": "ssh_authorize", "public_key": public_key})
        return reply.flag(body.get("added"), "added")

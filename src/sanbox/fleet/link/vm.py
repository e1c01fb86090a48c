"""A VM on a host reached over the network, as the control plane holds it in a `Machine`: its
liveness from the host's latest report, its end asked of the host, its guest agent dialled
through the host agent's tunnel. What only the host does to a VM (saving its state, switching
its disk) is the host's own flow, asked for through the door's calls; here it is refused."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ...host.door import AgentRouteError, HostError, Liveness
from .link import CONNECT_TIMEOUT

if TYPE_CHECKING:
    from ...host.agent.dial import Streams
    from .remote import RemoteHost

log = logging.getLogger(__name__)
TUNNEL_READ = 1 << 20
HANDSHAKE_TIMEOUT = 15.0  # a host that accepted the connection but is slow to finish TLS


async def _connected(loop: asyncio.AbstractEventLoop, host: str, port: int) -> socket.socket:
    """A TCP connection to host:port (the first address that accepts), non-blocking."""
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    last: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, address)
        except BaseException as exc:
            sock.close()
            if not isinstance(exc, OSError):
                raise
            last = exc
            continue
        return sock
    raise last


class RemoteVm:
    pid = 0  # a process on another machine

    def __init__(self, host: RemoteHost, computer_id: str, isolation: str) -> None:
        self.host = host
        self.computer_id = computer_id
        self.isolation = isolation
        self.run_dir = Path(f"/{host.name}/computers/{computer_id}/run")  # names, never opened

    @property
    def dir(self) -> Path:
        return self.run_dir.parent

    @property
    def agent_socket(self) -> Path:
        return self.run_dir / "agent.sock"

    async def dial_agent(self) -> Streams:
        """A stream to the guest agent through the host agent's tunnel. A host whose TCP
        connect does not complete within CONNECT_TIMEOUT is AgentRouteError at once (not dialled
        again: it is unreachable until its report is read again); one that answers but is slow
        to finish TLS under load gets HANDSHAKE_TIMEOUT, since it is there."""
        host, port = self.host.tunnel
        tls: ssl.SSLContext = self.host.tls
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                sock = await _connected(loop, host, port)
            reader, writer = await asyncio.open_connection(
                sock=sock,
                ssl=tls,
                server_hostname=self.host.server_name or host,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT,
                limit=TUNNEL_READ,
            )
        except OSError as exc:  # refused, unroutable, or no answer in time (TimeoutError)
            self.host.lost()
            raise AgentRouteError(
                f"host {self.host.name} does not answer: {str(exc) or type(exc).__name__}"
            ) from exc
        if tls is not self.host.tls:  # the link was bound again meanwhile (`HostLink.rebind`)
            writer.transport.abort()
            raise AgentRouteError(f"host {self.host.name} joined again: dial it anew")
        self.host.tunnel_opened(writer)
        writer.write(f"{self.computer_id}\n".encode())
        await writer.drain()
        return reader, writer

    def liveness(self) -> Liveness:
        return self.host.liveness(self.computer_id)

    def alive(self) -> bool:
        return self.liveness() is not Liveness.DEAD

    async def frozen(self) -> bool | None:
        """Whether its host stopped its vCPUs, as the host's own handle says; None if the host
        could not say (unreachable, or an agent from before the call)."""
        try:
            found = await self.host.call("frozen", computer_id=self.computer_id)
        except HostError as exc:
            log.info("%s: whether it is frozen is unknown: %s", self.computer_id, exc)
            return None
        return found if isinstance(found, bool) else None

    async def wait_exit(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            await self.host.refresh()
            if self.liveness() is Liveness.DEAD:
                return True
            await asyncio.sleep(0.2)
        return False

    async def kill(self, timeout: float = 5.0) -> None:
        await self.host.kill(self.computer_id)

    async def disk_error(self) -> str | None:
        return await self.host.disk_error(self.computer_id)

    def _host_only(self, what: str) -> HostError:
        return HostError(f"{what} of {self.computer_id} is done on host {self.host.name} itself")

    async def save_state(self, vmstate: Path) -> bool:
        raise self._host_only("saving the state")

    async def save_state_in_place(
        self, vmstate: Path, memory_fd: int, into_fd: int | None = None
    ) -> list[tuple[int, int]] | None:
        raise self._host_only("saving the state")

    async def save_state_live(self, vmstate: Path, at_stop: Callable[[], Awaitable[None]]) -> float:
        raise self._host_only("saving the state")

    def split_saved_state(
        self, stream: Path, vmstate: Path, memory: Path, memory_bytes: int
    ) -> None:
        raise self._host_only("splitting a saved state")

    async def load_state(self, vmstate: Path) -> None:
        raise self._host_only("loading a state")

    async def continue_running(self) -> None:
        """Its vCPUs, left stopped by a failed save, run again (a repair: a save's own stop and
        continue are the host's flow)."""
        await self.host.call("continue_running", computer_id=self.computer_id)

    async def quit(self) -> None:
        await self.kill()

    async def pause(self) -> None:
        raise self._host_only("stopping the vCPUs")

    async def switch_disk(self, overlay: Path) -> None:
        raise self._host_only("switching the disk")

    async def stream_disk(self, base: Path) -> None:
        raise self._host_only("streaming the disk")

    async def grow_disk(self, size_bytes: int) -> None:
        raise self._host_only("growing the disk")

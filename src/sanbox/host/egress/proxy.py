"""The egress proxy of one computer. The guest's TCP 80 and 443 arrive here (redirected inside its
namespace); the proxy reads the HTTP Host or the TLS SNI, checks it against the allowlist,
resolves the name itself and dials that (never the address the guest chose), refuses private,
loopback, link-local and metadata addresses after resolution, then relays bytes. TLS is passed
through untouched. Allowed `cidr:port` flows arrive on their own socket and go to their original
destination. A live policy change closes the flows it no longer allows."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .policy import Policy, blocked_address
from .resolver import ResolveError, Resolver
from .sniff import INCOMPLETE, NOT_HTTP, NOT_TLS, http_host, tls_server_name

log = logging.getLogger(__name__)
SO_ORIGINAL_DST = 80
SNIFF_LIMIT = 64 * 1024
SNIFF_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
Denied = Callable[[str, int, str], None]  # (name or address, port, reason)


def original_destination(sock: socket.socket) -> tuple[str, int]:
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port = struct.unpack_from("!H", raw, 2)[0]
    return socket.inet_ntoa(raw[4:8]), port


@dataclass(eq=False)  # hashed by identity: each flow is one connection
class Flow:
    name: str | None  # the host name it was allowed for; None for a cidr:port flow
    address: str
    port: int
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def close(self) -> None:
        for w in self.writers:
            w.close()


class EgressProxy:
    def __init__(
        self,
        policy: Callable[[], Policy],
        resolver: Resolver,
        on_denied: Denied | None = None,
    ) -> None:
        self.policy = policy
        self.resolver = resolver
        self.on_denied: Denied = on_denied or (lambda _n, _p, _r: None)
        self.flows: set[Flow] = set()
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    async def serve(self, http: socket.socket, tls: socket.socket, direct: socket.socket) -> None:
        """Start accepting on the three (namespace-bound, listening) sockets."""
        for sock, kind in ((http, "http"), (tls, "tls"), (direct, "direct")):

            async def handle(
                r: asyncio.StreamReader, w: asyncio.StreamWriter, k: str = kind
            ) -> None:
                await self._handle(k, r, w)

            self._servers.append(await asyncio.start_server(handle, sock=sock))

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for flow in list(self.flows):
            flow.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()

    def revalidate(self) -> list[Flow]:
        """Close the open flows the current policy no longer allows; return them."""
        policy = self.policy()
        cut = [f for f in self.flows if not self._still_allowed(policy, f)]
        for flow in cut:
            flow.close()
        return cut

    @staticmethod
    def _still_allowed(policy: Policy, flow: Flow) -> bool:
        if flow.name is not None:
            return policy.allows_host(flow.name)
        return policy.allows_direct(flow.address, flow.port)

    # one connection ---------------------------------------------------------------------------

    async def _handle(
        self, kind: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            sock = writer.get_extra_info("socket")
            orig_ip, orig_port = original_destination(sock)
            policy = self.policy()
            if policy.allows_direct(orig_ip, orig_port):
                await self._direct(orig_ip, orig_port, b"", reader, writer)
            elif kind == "direct":
                self._deny(writer, orig_ip, orig_port, "no cidr:port rule allows it")
            else:  # the guest may only have dialled 80 or 443 to get here
                await self._by_name(kind, 443 if kind == "tls" else 80, reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except Exception:
            log.exception("egress proxy connection failed")
        finally:
            writer.close()

    async def _by_name(
        self, kind: str, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head = b""
        sniff = tls_server_name if kind == "tls" else http_host
        name: Any = INCOMPLETE
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SNIFF_TIMEOUT
        while name is INCOMPLETE and len(head) < SNIFF_LIMIT:
            async with asyncio.timeout_at(max(deadline, loop.time() + 0.01)):
                chunk = await reader.read(16384)
            if not chunk:
                return
            head += chunk
            name = sniff(head)
        if name is INCOMPLETE or name is NOT_TLS or name is NOT_HTTP or not name:
            what = "TLS without SNI" if kind == "tls" else "HTTP without a Host header"
            self._deny(writer, "?", port, f"{what}: the destination cannot be named")
            return
        if not self.policy().allows_host(name):
            self._deny(writer, name, port, "not in the allowlist", http=kind == "http")
            return
        try:
            addresses = await self.resolver.resolve_a(name)
        except ResolveError as exc:
            self._deny(writer, name, port, f"does not resolve: {exc}", http=kind == "http")
            return
        usable = [a for a in addresses if blocked_address(a) is None]
        if not usable:
            why = blocked_address(addresses[0]) if addresses else "no address"
            self._deny(writer, name, port, f"resolves to {why}", http=kind == "http")
            return
        await self._relay(Flow(name, usable[0], port), head, reader, writer)

    async def _direct(
        self, ip: str, port: int, head: bytes, reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:  # fmt: skip
        why = blocked_address(ip)
        if why is not None and ip.startswith(("127.", "169.254.", "0.")):
            self._deny(writer, ip, port, f"{why} is never reachable")
            return
        await self._relay(Flow(None, ip, port), head, reader, writer)

    def _deny(
        self, writer: asyncio.StreamWriter, name: str, port: int, reason: str, http: bool = False
    ) -> None:
        log.info("egress denied: %s:%d (%s)", name, port, reason)
        self.on_denied(name, port, reason)
        if http:
            body = f"Sanbox egress: {name} is blocked ({reason})\n".encode()
            writer.write(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )

    async def _relay(
        self, flow: Flow, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                up_reader, up_writer = await asyncio.open_connection(flow.address, flow.port)
        except (OSError, TimeoutError) as exc:
            self.on_denied(flow.name or flow.address, flow.port, f"cannot connect: {exc}")
            return
        flow.writers = [writer, up_writer]
        self.flows.add(flow)
        try:
            if head:
                up_writer.write(head)
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            self.flows.discard(flow)
            up_writer.close()


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(256 * 1024):
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
    except (ConnectionError, OSError):
        dst.close()

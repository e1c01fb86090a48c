"""The egress proxy of one computer. The guest's TCP 80 and 443 arrive here (redirected inside its
namespace); the proxy reads the HTTP Host or the TLS SNI, checks it against the allowlist,
resolves the name itself and dials that (never the address the guest chose), refuses addresses
computers may never reach (`reach.py`: this host, private ranges the operator did not open,
loopback, link-local, metadata), then relays. TLS is passed through untouched, except to the hosts
a secret bound to the computer lists (`interception`): those go through the secret proxy
(`intercept.py`), which terminates TLS and adds the secret to each request. Plain HTTP carries
one checked request per connection (`http_request.py`): a second request on it is never relayed,
smuggling shapes are refused before anything goes out; with strict placeholders, one carrying a
bound secret's placeholder for another host is refused too. Allowed `cidr:port` flows arrive on
their own socket and go to their original destination, after the same address check.

Bounds: at most `max_connections` connections at once, and within the org's and the server's
`budget` (`budget.py`; more are closed on accept and reported as one rate-limited denial), a
deadline to name the destination, and an idle timeout on every relay.
A live policy change closes the flows it no longer allows."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from .budget import ConnectionBudget
from .http_request import Accepted, GuestEvent, GuestRequest, Refusal, refusal_bytes
from .injection import placeholder_refusal
from .intercept import Interception, RefusedError, Streams, intercept
from .policy import Policy
from .reach import Reach
from .relay import IDLE_TIMEOUT, Exchange, raw
from .resolver import ResolveError, Resolver
from .sniff import INCOMPLETE, NOT_TLS, tls_server_name
from .traffic import Traffic

log = logging.getLogger(__name__)
SO_ORIGINAL_DST = 80
SNIFF_LIMIT = 64 * 1024
SNIFF_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
MAX_CONNECTIONS = 512  # per computer
Denied = Callable[[str, int, str], None]  # (name or address, port, reason)
_PORTS = {"http": 80, "tls": 443}


def _no_delay(writer: asyncio.StreamWriter) -> None:
    """Small writes go out at once: a relay must not add Nagle's wait to its endpoints' (asyncio
    sets it only on sockets made with IPPROTO_TCP; those bound in a namespace are made with 0)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def original_destination(sock: socket.socket) -> tuple[str, int]:
    raw_addr = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port = struct.unpack_from("!H", raw_addr, 2)[0]
    return socket.inet_ntoa(raw_addr[4:8]), port


@dataclass(eq=False)  # hashed by identity: each flow is one connection
class Flow:
    name: str | None  # the host name it was allowed for; None for a cidr:port flow
    address: str
    port: int
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def close(self) -> None:
        """Cut it: both sockets shut down (bytes the kernel relays stop too), then closed."""
        for w in self.writers:
            sock = w.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            w.close()


class EgressProxy:
    def __init__(
        self,
        policy: Callable[[], Policy],
        resolver: Resolver,
        on_denied: Denied | None = None,
        reach: Reach | None = None,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout: float = IDLE_TIMEOUT,
        interception: Interception | None = None,
        budget: ConnectionBudget | None = None,
        org: str = "",
        kernel: bool = True,
    ) -> None:
        self.policy = policy
        self.kernel = kernel  # checked bytes relayed in the kernel (splice.py)
        self.resolver = resolver
        self.on_denied: Denied = on_denied or (lambda _n, _p, _r: None)
        self.reach = reach or Reach()
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.interception = interception  # the secrets bound to this computer, if any
        self.budget, self.org = budget, org  # shared with the other computers' proxies
        self.active = 0  # connections being handled now
        self.traffic = Traffic()  # bytes its upstream connections carried
        self.flows: set[Flow] = set()
        self._servers: list[asyncio.Server] = []

    async def serve(self, http: socket.socket, tls: socket.socket, direct: socket.socket) -> None:
        """Start accepting on the three (namespace-bound, listening) sockets."""
        for sock, kind in ((http, "http"), (tls, "tls"), (direct, "direct")):

            async def handle(
                r: asyncio.StreamReader, w: asyncio.StreamWriter, k: str = kind
            ) -> None:
                why = self._admit()
                if why is not None:
                    w.transport.abort()
                    self.on_denied("*", _PORTS.get(k, 0), why)
                    return
                _no_delay(w)
                try:
                    await self._handle(k, r, w)
                finally:
                    self.active -= 1
                    if self.budget is not None:
                        self.budget.give_back(self.org)

            self._servers.append(await asyncio.start_server(handle, sock=sock))

    def _admit(self) -> str | None:
        """Count a new connection (None), or say why it is over a cap."""
        if self.active >= self.max_connections:
            return f"over the cap of {self.max_connections} open connections"
        why = self.budget.take(self.org) if self.budget is not None else None
        if why is None:
            self.active += 1
        return why

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
        port = _PORTS.get(kind, 0)
        try:
            orig_ip, port = original_destination(writer.get_extra_info("socket"))
            if self.policy().allows_direct(orig_ip, port):
                await self._direct(orig_ip, port, (reader, writer))
            elif kind == "direct":
                raise RefusedError(orig_ip, "no cidr:port rule allows it")
            elif kind == "tls":
                await self._tls((reader, writer))
            else:
                await self._http((reader, writer))
        except RefusedError as exc:
            self.on_denied(exc.name, port, exc.reason)
            if kind == "http":
                with contextlib.suppress(Exception):
                    writer.write(refusal_bytes(exc.status, exc.answer()))
        except (ConnectionError, OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except Exception:
            log.exception("egress proxy connection failed")
        finally:
            writer.close()

    async def _tls(self, guest: Streams) -> None:
        head = b""
        name: Any = INCOMPLETE
        async with asyncio.timeout(SNIFF_TIMEOUT):
            while name is INCOMPLETE and len(head) < SNIFF_LIMIT:
                chunk = await guest[0].read(16384)
                if not chunk:
                    return
                head += chunk
                name = tls_server_name(head)
        if name is INCOMPLETE or name is NOT_TLS or not name:
            raise RefusedError("?", "TLS without SNI: the destination cannot be named")
        flow = Flow(name, await self._address(name), 443)
        if self.interception is not None and self.interception.applies(name):
            self.flows.add(flow)
            try:
                await intercept(
                    guest,
                    head,
                    name,
                    flow.address,
                    self.interception,
                    self.idle_timeout,
                    writers=flow.writers,
                    traffic=self.traffic,
                )
            finally:
                self.flows.discard(flow)
            return
        async with self._dialled(flow, guest[1]) as upstream:
            upstream[1].write(head)
            await raw(guest, upstream, self.idle_timeout, self.kernel)

    async def _http(self, guest: Streams) -> None:
        request = GuestRequest()
        events: list[GuestEvent] = []
        async with asyncio.timeout(SNIFF_TIMEOUT):
            while not events:
                chunk = await guest[0].read(16384)
                if not chunk:
                    return  # gone before naming anything
                events = request.feed(chunk)
        first = events[0]
        if isinstance(first, Refusal):
            raise RefusedError(
                request.head.name if request.head else "?", first.reason, first.status
            )
        assert isinstance(first, Accepted)
        self._check_placeholders(first)
        flow = Flow(first.head.name, await self._address(first.head.name), 80)
        async with self._dialled(flow, guest[1]) as upstream:
            exchange = Exchange(request, guest, upstream, self.kernel)
            await exchange.run(first, events[1:], self.idle_timeout)

    def _check_placeholders(self, accepted: Accepted) -> None:
        """A strict proxy refuses plain HTTP carrying a bound secret's placeholder for another
        host, as it does on intercepted connections (no secret is ever added to plain HTTP)."""
        bound = self.interception
        if bound is None or not bound.strict_placeholders:
            return
        headers = list(accepted.request.headers.raw_items())
        why = placeholder_refusal(headers, accepted.head.name, bound.injections())
        if why is not None:
            raise RefusedError(accepted.head.name, why, 403)

    async def _direct(self, ip: str, port: int, guest: Streams) -> None:
        why = self.reach.refusal(ip)
        if why is not None:
            raise RefusedError(ip, f"{why}: not for computers")
        async with self._dialled(Flow(None, ip, port), guest[1]) as upstream:
            await raw(guest, upstream, self.idle_timeout, self.kernel)

    async def _address(self, name: str) -> str:
        """The address to dial for an allowed `name`: resolved here, checked."""
        if not self.policy().allows_host(name):
            raise RefusedError(name, "not in the allowlist")
        try:
            addresses = await self.resolver.resolve_a(name)
        except ResolveError as exc:
            raise RefusedError(name, f"does not resolve: {exc}", 502) from None
        usable = [a for a in addresses if self.reach.refusal(a) is None]
        if not usable:
            why = self.reach.refusal(addresses[0]) if addresses else "no address"
            raise RefusedError(name, f"resolves to {why}")
        return usable[0]

    @contextlib.asynccontextmanager
    async def _dialled(
        self, flow: Flow, guest_writer: asyncio.StreamWriter
    ) -> AsyncIterator[Streams]:
        """The open upstream connection of `flow`, listed in `flows` while it is open."""
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                upstream = await asyncio.open_connection(flow.address, flow.port)
        except (OSError, TimeoutError) as exc:
            raise RefusedError(flow.name or flow.address, f"cannot connect: {exc}", 502) from None
        flow.writers = [guest_writer, upstream[1]]
        self.flows.add(flow)
        self.traffic.opened(upstream[1])
        try:
            yield upstream
        finally:
            self.flows.discard(flow)
            self.traffic.closing(upstream[1])
            upstream[1].close()

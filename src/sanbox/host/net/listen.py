"""Sockets inside a computer's namespace for the server's own listeners (DNS filter, egress
proxy). A socket keeps the namespace it was created in, so a short-lived thread enters the
namespace (setns), creates and binds them, and hands them back to the event loop."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from ..linux import in_netns
from .addresses import GATEWAY_IP
from .netns import NetworkError


@dataclass(frozen=True)
class Endpoint:
    port: int
    kind: int  # socket.SOCK_STREAM or socket.SOCK_DGRAM


def _bind_all(endpoints: list[Endpoint], address: str) -> list[socket.socket]:
    sockets: list[socket.socket] = []
    try:
        for ep in endpoints:
            sock = socket.socket(socket.AF_INET, ep.kind)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, ep.port))
            if ep.kind == socket.SOCK_STREAM:
                sock.listen(128)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def bind_in_netns(
    netns: str, endpoints: list[Endpoint], address: str = GATEWAY_IP
) -> list[socket.socket]:
    """Bound (and listening), non-blocking sockets on `address` (the gateway's by default)
    inside `netns`, in order."""
    try:
        return in_netns(netns, lambda: _bind_all(endpoints, address))
    except OSError as exc:
        raise NetworkError(f"cannot listen in {netns}: {exc}") from exc

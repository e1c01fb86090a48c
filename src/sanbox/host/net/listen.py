"""Sockets inside a computer's namespace for the server's own listeners (DNS filter, egress
proxy). A socket keeps the namespace it was created in, so a short-lived thread enters the
namespace (setns), creates and binds them, and hands them back to the event loop."""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from dataclasses import dataclass

from .addresses import GATEWAY_IP
from .netns import NetworkError

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Endpoint:
    port: int
    kind: int  # socket.SOCK_STREAM or socket.SOCK_DGRAM


def _bind_all(netns: str, endpoints: list[Endpoint], address: str) -> list[socket.socket]:
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise NetworkError(f"cannot enter namespace {netns}: {os.strerror(err)}")
    finally:
        os.close(fd)
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
    result: list[socket.socket] = []
    error: list[BaseException] = []

    def work() -> None:  # this thread's namespace changes; it ends right after
        try:
            result.extend(_bind_all(netns, endpoints, address))
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=work, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if error:
        exc = error[0]
        if isinstance(exc, OSError):
            raise NetworkError(f"cannot listen in {netns}: {exc}") from exc
        raise exc
    return result

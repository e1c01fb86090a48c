"""Where the host's package tools run for a template build: as the unprivileged `sanbox-fetch`
user, in a fresh network namespace that has only loopback, whose one way out is a proxy on that
loopback that dials only the package registries (`fetch_policy`), each run of a tool in a PID
namespace of its own, so nothing it started outlives it (`reaped_argv`).

    with FetchSandbox.open(configured_urls) as sandbox:
        sandbox.own(work)                                    # the tool's folders: the user's
        result = sandbox.run(argv, work=work, timeout=...)   # a ToolResult, as run_tool's

The namespace is made with `ip netns add`; the proxy's listening socket is created inside it by
a short-lived thread that enters it (setns), as `host/net/listen.py` does, while the proxy's
threads serve in the host's namespace and dial out from there. A tool in the namespace reaches
nothing else: no address of the host, no other port, no name outside the list.

Not root (no namespace can be made): `FetchError`, unless `SANBOX_FETCH_UNCONFINED=1` says to
run the tools as this user, unconfined (development only)."""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from ..host.net.listen import Endpoint, bind_in_netns
from .fetch_common import (
    DEFAULT_TIMEOUT,
    DiskBound,
    FetchError,
    ToolResult,
    run_tool,
    traversable,
)
from .fetch_policy import (
    FETCH_USER,
    MAX_HEAD,
    UNCONFINED_SETTING,
    ProxyRequestError,
    allowed,
    apt_proxy_options,
    parse_request,
    proxy_env,
    registries,
    sandboxed_argv,
)

log = logging.getLogger(__name__)

DIAL_TIMEOUT = 20.0  # seconds to connect to a registry
IDLE_TIMEOUT = 300.0  # seconds a proxied connection may sit without a byte
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"  # where a tool is looked for first (as proxy_env's)


def fetch_user() -> tuple[int, int]:
    """The fetch user's uid and gid, made (a system user, no home, no shell) if missing."""
    try:
        entry = pwd.getpwnam(FETCH_USER)
    except KeyError:
        argv = [
            "useradd",
            "--system",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            FETCH_USER,
        ]
        out = subprocess.run(argv, capture_output=True, text=True, check=False)
        if out.returncode not in (0, 9):  # 9: another process made it first
            log.error("cannot create %s: %s", FETCH_USER, out.stderr.strip())
            raise FetchError("host", "the host cannot fetch packages now") from None
        entry = pwd.getpwnam(FETCH_USER)
    return entry.pw_uid, entry.pw_gid


def _listen_in(netns: str) -> socket.socket:
    """A listening socket on 127.0.0.1 inside `netns`, for the proxy's blocking accept loop."""
    (sock,) = bind_in_netns(netns, [Endpoint(0, socket.SOCK_STREAM)], "127.0.0.1")
    sock.setblocking(True)
    return sock


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


class RegistryProxy:
    """A CONNECT/HTTP proxy on a socket inside the namespace that dials only `names`."""

    def __init__(self, listener: socket.socket, names: frozenset[str]) -> None:
        self.listener, self.names = listener, names
        self.refused: list[str] = []  # what it refused, for the server's log
        self._thread = threading.Thread(target=self._serve, name="fetch-proxy", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _head(self, conn: socket.socket) -> bytes:
        head = b""
        while b"\r\n\r\n" not in head:
            data = conn.recv(4096)
            if not data or len(head) + len(data) > MAX_HEAD:
                raise ProxyRequestError("no complete request head")
            head += data
        return head

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(IDLE_TIMEOUT)
        with conn:
            try:
                head = self._head(conn)
                req = parse_request(head)
                why = allowed(req.method, req.host, req.port, self.names)
                if why is not None:
                    raise ProxyRequestError(why)
            except (ProxyRequestError, OSError) as exc:
                self.refused.append(str(exc))
                log.warning("fetch proxy refused a request: %s", exc)
                with contextlib.suppress(OSError):
                    conn.sendall(
                        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                return
            try:
                upstream = socket.create_connection((req.host, req.port), DIAL_TIMEOUT)
            except OSError as exc:
                log.warning("fetch proxy could not reach %s:%s: %s", req.host, req.port, exc)
                with contextlib.suppress(OSError):
                    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            with upstream:
                upstream.settimeout(IDLE_TIMEOUT)
                if req.method == "CONNECT":
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    rest = head.split(b"\r\n\r\n", 1)[1]
                else:  # one request per connection, sent in origin form
                    lines = head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]
                    kept = [
                        h
                        for h in lines
                        if not h.lower().startswith((b"proxy-", b"connection:", b"keep-alive:"))
                    ]
                    rest = b"\r\n".join(
                        [
                            f"{req.method} {req.target} HTTP/1.1".encode(),
                            *kept,
                            b"Connection: close",
                            b"",
                            b"",
                        ]
                    )
                if rest:
                    upstream.sendall(rest)
                back = threading.Thread(target=_pipe, args=(upstream, conn), daemon=True)
                back.start()
                _pipe(conn, upstream)
                back.join(timeout=IDLE_TIMEOUT)


class FetchSandbox:
    """A namespace, its proxy and the fetch user, for the tools of one fetch."""

    def __init__(self, netns: str | None, proxy: RegistryProxy | None, uid: int, gid: int) -> None:
        self.netns, self.proxy, self.uid, self.gid = netns, proxy, uid, gid

    @classmethod
    @contextlib.contextmanager
    def open(
        cls, configured: Iterable[str] = (), env: Mapping[str, str] | None = None
    ) -> Iterator[FetchSandbox]:
        env = os.environ if env is None else env
        if os.geteuid() != 0:
            if env.get(UNCONFINED_SETTING) == "1":
                log.warning(
                    "fetching packages unconfined (%s=1): development only", UNCONFINED_SETTING
                )
                yield cls(None, None, os.getuid(), os.getgid())
                return
            log.error(
                "package fetch refused: the server is not root, so it cannot confine "
                "the fetch tools (set %s=1 for development)",
                UNCONFINED_SETTING,
            )
            raise FetchError(
                "host",
                "this host cannot fetch packages (an operator can see why in the server's log)",
            )
        uid, gid = fetch_user()
        netns = f"sanbox-fetch-{secrets.token_hex(6)}"
        made = subprocess.run(
            ["ip", "netns", "add", netns], capture_output=True, text=True, check=False
        )
        if made.returncode != 0:
            log.error("cannot make the fetch namespace %s: %s", netns, made.stderr.strip())
            raise FetchError("host", "this host cannot fetch packages now (see the server's log)")
        proxy = None
        try:
            subprocess.run(
                ["ip", "-n", netns, "link", "set", "lo", "up"], check=True, capture_output=True
            )
            proxy = RegistryProxy(_listen_in(netns), registries(env, configured))
            yield cls(netns, proxy, uid, gid)
        finally:
            if proxy is not None:
                proxy.close()
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)

    def own(self, *paths: Path) -> None:
        """Give `paths` (and all under them) to the fetch user: the tools write there. The
        folders above them must let any user pass (a data dir closed to others is refused, in
        words for the operator in the server's log)."""
        if self.netns is None:
            return
        for top in paths:
            if not traversable(top.parent):
                log.error(
                    "the %s user cannot reach %s: let it pass through the data dir's "
                    "folders (chmod o+x on each)",
                    FETCH_USER,
                    top.parent,
                )
                raise FetchError(
                    "host", "this host cannot fetch packages now (see the server's log)"
                )
        for top in paths:
            for path in [top, *top.rglob("*")]:
                os.lchown(path, self.uid, self.gid)

    def reclaim(self, *paths: Path) -> None:
        """Back to root, before root reads or moves what the tools wrote."""
        if self.netns is None:
            return
        for top in paths:
            for path in [top, *top.rglob("*")]:
                os.lchown(path, 0, 0)

    def env(self, home: Path, host_env: Mapping[str, str] | None = None) -> dict[str, str]:
        host = os.environ if host_env is None else host_env
        if self.proxy is None:
            return {**host, "HOME": str(home)}
        return proxy_env(self.proxy.port, str(home), host)

    def apt_options(self) -> list[str]:
        return apt_proxy_options(self.proxy.port) if self.proxy is not None else []

    def run(
        self,
        argv: Sequence[str],
        *,
        work: Path,
        timeout: float = DEFAULT_TIMEOUT,
        env: Mapping[str, str] | None = None,
        bound: DiskBound | None = None,
    ) -> ToolResult:
        """`argv` (a tool name or path) as the fetch user in the namespace, through the proxy;
        killed past `bound` (FetchError)."""
        # the system's tool first: the fetch user may not reach a root-only PATH entry
        tool = shutil.which(argv[0], path=SYSTEM_PATH) or shutil.which(argv[0]) or argv[0]
        full = [tool, *argv[1:]]
        if self.netns is not None:
            full = sandboxed_argv(full, self.netns, self.uid, self.gid)
        # the log in a folder of root's: root never opens a path in the user's folders
        with tempfile.TemporaryDirectory(prefix="sanbox-fetch-log-") as logs:
            return run_tool(
                full,
                work=work,
                timeout=timeout,
                log_dir=Path(logs),
                cwd=work,
                env=env if env is not None else self.env(work),
                bound=bound,
            )

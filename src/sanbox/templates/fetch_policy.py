"""The pure half of the fetch sandbox (`fetch_sandbox`): which registries a host-side fetcher may
reach, how the sandbox's proxy reads a request, and the argv and environment a fetcher tool runs
with. No I/O: unit-tested alone.

A fetcher tool (apt-get, pip, npm) runs as an unprivileged user in a network namespace with only
loopback; its one way out is a proxy on that loopback that dials only the registries' names, on
port 443 (CONNECT) or 80 (plain GET/HEAD), and nothing else."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_REGISTRIES = (
    "pypi.org",
    "files.pythonhosted.org",
    "deb.debian.org",
    "security.debian.org",
    "registry.npmjs.org",
)
REGISTRIES_SETTING = "SANBOX_BUILD_REGISTRIES"  # comma-separated names, replacing the defaults
UNCONFINED_SETTING = "SANBOX_FETCH_UNCONFINED"  # "1": fetch as this user, unsandboxed (dev only)
PORTS = {"CONNECT": (443,), "GET": (80,), "HEAD": (80,)}
MAX_HEAD = 16 * 1024  # bytes of a request line and headers the proxy reads
FETCH_USER = "sanbox-fetch"
# what the host's own configuration of the tools says, passed to them (file:// indexes too)
PASSED_ENV = re.compile(
    r"^(PIP_[A-Z_]+|LANG|LC_[A-Z]+|TZ"
    r"|SSL_CERT_FILE|SSL_CERT_DIR|REQUESTS_CA_BUNDLE|NODE_EXTRA_CA_CERTS)$"  # the operator's CAs
)
_HOST = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?)*$"
)


class ProxyRequestError(ValueError):
    """A request the sandbox's proxy refuses: the reason (logged, never shown to a tenant)."""


@dataclass(frozen=True)
class ProxyRequest:
    method: str  # CONNECT | GET | HEAD
    host: str
    port: int
    target: str  # what to send upstream as the request target (origin form); "" for CONNECT


def registries(env: Mapping[str, str], configured: Iterable[str] = ()) -> frozenset[str]:
    """The names a fetcher may reach: the setting (or the defaults) and the hosts of the URLs the
    operator configured (apt sources, pip index URLs, the npm registry)."""
    setting = env.get(REGISTRIES_SETTING, "")
    names = [n.strip() for n in setting.split(",") if n.strip()] or list(DEFAULT_REGISTRIES)
    for url in configured:
        host = urlsplit(url).hostname
        if host and urlsplit(url).scheme in ("http", "https"):
            names.append(host)
    return frozenset(n.lower().rstrip(".") for n in names if _HOST.match(n.lower().rstrip(".")))


def allowed(method: str, host: str, port: int, names: frozenset[str]) -> str | None:
    """None if the proxy may dial `host:port` for `method`, else why not."""
    if method not in PORTS:
        return f"method {method} is not proxied"
    if port not in PORTS[method]:
        return f"port {port} is not a registry port for {method}"
    name = host.lower().rstrip(".")
    if not _HOST.match(name):
        return f"{host!r} is not a host name"
    if name not in names:
        return f"{name} is not a package registry"
    return None


def parse_request(head: bytes) -> ProxyRequest:
    """The request line of what a fetcher sent the proxy: `CONNECT host:443 HTTP/1.1` or
    `GET http://host/path HTTP/1.1`."""
    line = head.split(b"\r\n", 1)[0].decode("ascii", errors="replace")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ProxyRequestError(f"not an HTTP/1 request line: {line[:100]!r}")
    method, target, _version = parts
    if method == "CONNECT":
        host, sep, port = target.rpartition(":")
        if not sep or not port.isdigit() or host.startswith("["):
            raise ProxyRequestError(f"CONNECT to {target[:100]!r} is not host:port")
        return ProxyRequest(method, host, int(port), "")
    if method not in PORTS:
        raise ProxyRequestError(f"method {method[:20]!r} is not proxied")
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname or url.username or url.password:
        raise ProxyRequestError(f"{target[:100]!r} is not an http:// URL")
    path = url.path or "/"
    return ProxyRequest(
        method, url.hostname, url.port or 80, path + (f"?{url.query}" * bool(url.query))
    )


def proxy_env(port: int, home: str, host_env: Mapping[str, str]) -> dict[str, str]:
    """The environment of a fetcher tool: the proxy on the namespace's loopback, a home of its
    own, and the host's pip/locale settings (so a file:// index the operator set stays used)."""
    proxy = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in host_env.items() if PASSED_ENV.match(k)}
    return {
        **env,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "HTTP_PROXY": proxy,
        "HTTPS_PROXY": proxy,
        "http_proxy": proxy,
        "https_proxy": proxy,
        "NO_PROXY": "",
        "no_proxy": "",
        "npm_config_proxy": proxy,
        "npm_config_https_proxy": proxy,
    }


def apt_proxy_options(port: int) -> list[str]:
    proxy = f"http://127.0.0.1:{port}"
    return [
        "-o",
        f"Acquire::http::Proxy={proxy}",
        "-o",
        f"Acquire::https::Proxy={proxy}",
        "-o",
        "APT::Sandbox::User=",
        "-o",
        "Debug::NoLocking=true",
    ]


def reaped_argv(argv: Sequence[str]) -> list[str]:
    """`argv` as the first process of a PID namespace of its own (root only): when it ends, or
    is killed with its process group as `run_tool` does, the kernel kills every process left in
    the namespace, a child that left the group (`setsid`, a double fork) too. Nothing a tool
    ran outlives it to write into another fetch's folders as the same user."""
    return ["unshare", "--pid", "--fork", "--", *argv]


def sandboxed_argv(argv: Sequence[str], netns: str, uid: int, gid: int) -> list[str]:
    """`argv` inside the namespace, as the fetch user, with no groups and no way back up, its
    whole process tree ended with it."""
    user = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs"]
    return ["ip", "netns", "exec", netns, *reaped_argv([*user, "--", *argv])]

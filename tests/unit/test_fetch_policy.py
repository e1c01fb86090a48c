"""The fetch sandbox's pure decisions: its proxy dials only the registries, on 443 (CONNECT) or
80 (GET/HEAD); the fetch tools run as the fetch user in the namespace with the proxy set."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sanbox.templates.fetch_common import run_tool
from sanbox.templates.fetch_policy import (
    DEFAULT_REGISTRIES,
    ProxyRequestError,
    allowed,
    apt_proxy_options,
    parse_request,
    proxy_env,
    registries,
    sandboxed_argv,
)

pytestmark = pytest.mark.unit

NAMES = registries({})


def test_the_registries_are_the_defaults_or_the_setting_plus_what_the_operator_configured() -> None:
    assert frozenset(DEFAULT_REGISTRIES) == NAMES
    mine = registries(
        {"SANBOX_BUILD_REGISTRIES": "mirror.example, pypi.example"},
        ["http://deb.mirror.example/debian", "file:///opt/pypi/simple"],
    )
    assert mine == {"mirror.example", "pypi.example", "deb.mirror.example"}


@pytest.mark.parametrize(
    ("method", "host", "port"),
    [
        ("CONNECT", "pypi.org", 443),
        ("CONNECT", "registry.npmjs.org", 443),
        ("GET", "deb.debian.org", 80),
        ("HEAD", "Deb.Debian.org.", 80),
    ],
)
def test_the_proxy_dials_the_registries(method: str, host: str, port: int) -> None:
    assert allowed(method, host, port, NAMES) is None


@pytest.mark.parametrize(
    ("method", "host", "port", "why"),
    [
        ("CONNECT", "attacker.example", 443, "not a package registry"),
        ("CONNECT", "127.0.0.1", 443, "not a package registry"),
        ("CONNECT", "169.254.169.254", 443, "not a package registry"),
        ("CONNECT", "pypi.org", 22, "port 22"),
        ("CONNECT", "pypi.org", 80, "port 80"),
        ("GET", "deb.debian.org", 8080, "port 8080"),
        ("POST", "pypi.org", 80, "method POST"),
        ("CONNECT", "pypi.org.attacker.example", 443, "not a package registry"),
        ("CONNECT", "pypi.org\x00.x", 443, "not a host name"),
    ],
)
def test_the_proxy_refuses_everything_else(method: str, host: str, port: int, why: str) -> None:
    reason = allowed(method, host, port, NAMES)
    assert reason is not None and why in reason


def test_requests_are_read_as_connect_or_absolute_http() -> None:
    req = parse_request(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org\r\n\r\n")
    assert (req.method, req.host, req.port) == ("CONNECT", "pypi.org", 443)
    req = parse_request(b"GET http://deb.debian.org/debian/dists/x?y=1 HTTP/1.1\r\n\r\n")
    assert (req.host, req.port, req.target) == ("deb.debian.org", 80, "/debian/dists/x?y=1")
    for bad in (
        b"GET /relative HTTP/1.1\r\n\r\n",
        b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
        b"GET http://u:p@deb.debian.org/ HTTP/1.1\r\n\r\n",
        b"garbage\r\n\r\n",
        b"DELETE http://pypi.org/ HTTP/1.1\r\n\r\n",
    ):
        with pytest.raises(ProxyRequestError):
            parse_request(bad)


def test_the_tools_run_as_the_fetch_user_in_the_namespace_through_the_proxy() -> None:
    argv = sandboxed_argv(["/usr/bin/pip", "download", "x"], "sanbox-fetch-1", 990, 991)
    assert argv[:4] == ["ip", "netns", "exec", "sanbox-fetch-1"]
    assert argv[4:8] == ["unshare", "--pid", "--fork", "--"]  # its whole tree ends with it
    assert argv[8:14] == [
        "setpriv",
        "--reuid=990",
        "--regid=991",
        "--clear-groups",
        "--no-new-privs",
        "--",
    ]
    env = proxy_env(
        3128,
        "/w",
        {
            "PIP_FIND_LINKS": "/opt/wheels",
            "SANBOX_SECRET_KEY": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "HOME": "/root",
        },
    )
    assert env["HTTPS_PROXY"] == env["https_proxy"] == "http://127.0.0.1:3128"
    assert env["PIP_FIND_LINKS"] == "/opt/wheels" and env["HOME"] == "/w"
    assert "SANBOX_SECRET_KEY" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert "Acquire::https::Proxy=http://127.0.0.1:3128" in apt_proxy_options(3128)


def test_a_tool_and_what_it_started_end_with_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    result = run_tool(
        ["/bin/sh", "-c", f"sleep 60 & echo $! > {pidfile}; echo started"],
        work=tmp_path,
        timeout=10,
    )
    assert result.returncode == 0 and "started" in result.output
    status = Path(f"/proc/{pidfile.read_text().strip()}/status")
    deadline = time.monotonic() + 5  # SIGKILL was sent; wait for it to land
    while "State:\tZ" not in (status.read_text() if status.exists() else "State:\tZ"):
        assert time.monotonic() < deadline, "the tool's child outlived it"
        time.sleep(0.02)

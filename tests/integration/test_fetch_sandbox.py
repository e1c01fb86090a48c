"""The fetch sandbox for real (root): a tool in it runs as the fetch user in a namespace with only
loopback, so a listener on the host's 127.0.0.1 is out of its reach, and its proxy refuses a
CONNECT to a name that is not a registry (and to a registry on another port)."""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanbox.templates.fetch_policy import FETCH_USER
from sanbox.templates.fetch_sandbox import FetchSandbox

from ..reachable import reachable_dir

pytestmark = pytest.mark.integration

PROBE = """
import socket, sys
port = int(sys.argv[1])
try:
    socket.create_connection(("127.0.0.1", port), 2).close()
    print("host-listener: reached")
except OSError as exc:
    print("host-listener: refused", exc.errno)
proxy = int(sys.argv[2])
for target in ("attacker.example:443", "pypi.org:22", "127.0.0.1:%d" % port):
    s = socket.create_connection(("127.0.0.1", proxy), 5)
    s.sendall(("CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n" % (target, target)).encode())
    print(target, s.recv(100).split(b"\\r\\n")[0].decode())
import os
print("uid", os.getuid(), "groups", os.getgroups())
"""


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    with reachable_dir("sanbox-fetch-test-") as path:
        yield path


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace and a user need root")
def test_a_fetch_tool_reaches_nothing_but_the_proxy_and_the_proxy_only_registries(
    open_tmp: Path,
) -> None:
    tmp_path = open_tmp
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    script.chmod(0o644)
    tmp_path.chmod(0o755)
    with listener, FetchSandbox.open() as sandbox:
        assert sandbox.proxy is not None
        work = tmp_path / "work"
        work.mkdir()
        sandbox.own(work)
        result = sandbox.run(
            ["/usr/bin/python3", str(script), str(port), str(sandbox.proxy.port)],
            work=work,
            timeout=60,
        )
    out = result.output
    assert result.returncode == 0, out
    assert "host-listener: refused" in out  # the namespace has its own loopback
    assert "attacker.example:443 HTTP/1.1 403" in out
    assert "pypi.org:22 HTTP/1.1 403" in out
    assert f"127.0.0.1:{port} HTTP/1.1 403" in out
    uid = int(out.split("uid ")[1].split()[0])
    assert uid == pwd.getpwnam(FETCH_USER).pw_uid and uid != 0
    assert "groups []" in out

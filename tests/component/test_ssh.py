"""SSH access with the real agent as a local process: the `ssh` stream, the host key, the keys root
may log in with, the WebSocket relay, `sanbox ssh-proxy` and `sanbox ssh-config`.

There is no sshd on this host, and the agent must not touch the host's own /etc/ssh or /root:
every SSH path of the agent lives under `$SANBOX_AGENT_SSH_ROOT`, where a stand-in for sshd
records how it was started and echoes the connection's bytes (`cat`). The real sshd, with the real
OpenSSH clients, is the vm tier's (tests/vm/test_ssh.py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sanbox import Sanbox
from sanbox.cli.main import app
from sanbox.guest.ssh import ROOT_ENV
from sanbox.host.agent import AgentClient, RemoteError

from .conftest import SRC, LiveServer, Server
from .test_cli_exec_fastpath import LOADED

pytestmark = pytest.mark.component

BIN = Path(sys.executable).parent / "sanbox"
STAND_IN = """#!/bin/sh
# stands in for `sshd -i`: note how it was started, then echo the connection's bytes
root="$(dirname "$0")/../.."
echo "$@" > "$root/sshd-args"
[ -d "$root/run/sshd" ] && [ -s "$root/etc/ssh/ssh_host_ed25519_key" ] &&
  echo ready >> "$root/sshd-args"
exec cat
"""


def key_line(comment: str = "me@laptop", body: bytes = b"k" * 32) -> str:
    kind = "ssh-ed25519"
    blob = struct.pack(">I", len(kind)) + kind.encode() + struct.pack(">I", len(body)) + body
    return f"{kind} {base64.b64encode(blob).decode()} {comment}"


@contextlib.contextmanager
def stand_in_sshd(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The agents started from here keep their SSH files under this folder, with a stand-in sshd."""
    root = Path(tempfile.mkdtemp(prefix="sbssh", dir="/tmp"))
    sshd = root / "usr" / "sbin" / "sshd"
    sshd.parent.mkdir(parents=True)
    sshd.write_text(STAND_IN)
    sshd.chmod(0o755)
    monkeypatch.setenv(ROOT_ENV, str(root))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ssh_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with stand_in_sshd(monkeypatch) as root:
        yield root


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def create(server: Server, name: str) -> None:
    r = server.client.post("/v1/computers", json={"name": name}, headers=server.headers())
    assert r.status_code == 201, r.text


def test_ssh_keys_let_one_plain_key_in_once_and_answer_the_host_key(
    server: Server, ssh_root: Path
) -> None:
    create(server, "keys")
    h, url = server.headers(), "/v1/computers/keys/ssh-keys"
    assert not (ssh_root / "etc" / "ssh").exists()  # no host key before it is needed
    first = server.client.post(url, json={"public_key": key_line()}, headers=h)
    assert first.status_code == 200, first.text
    host_key = (ssh_root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().strip()
    assert first.json() == {"user": "root", "host_key": host_key, "added": True}
    assert host_key.startswith("ssh-ed25519 ")
    assert mode(ssh_root / "etc/ssh/ssh_host_ed25519_key") == 0o600
    authorized = ssh_root / "root" / ".ssh" / "authorized_keys"
    assert authorized.read_text() == key_line() + "\n"
    assert (mode(authorized.parent), mode(authorized)) == (0o700, 0o600)

    again = server.client.post(url, json={"public_key": key_line("renamed")}, headers=h)
    assert again.json() == {"user": "root", "host_key": host_key, "added": False}
    other = key_line("other", body=b"o" * 32)
    assert server.client.post(url, json={"public_key": other}, headers=h).json()["added"]
    assert authorized.read_text() == key_line() + "\n" + other + "\n"

    for attack in (f'command="sh -c evil" {key_line()}', f"{key_line()}\n{key_line('x')}"):
        r = server.client.post(url, json={"public_key": attack}, headers=h)
        assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_public_key")
    assert authorized.read_text() == key_line() + "\n" + other + "\n"
    r = server.client.post("/v1/computers/nope/ssh-keys", json={"public_key": other}, headers=h)
    assert (r.status_code, r.json()["error"]["code"]) == (404, "computer_not_found")
    r = server.client.post(url, json={"public_key": other}, headers=server.headers("sbk_wrong"))
    assert r.status_code == 401


def test_the_websocket_relays_a_connection_both_ways_under_flow_control(
    live_server: LiveServer, ssh_root: Path
) -> None:
    payload = os.urandom(3 * 1024 * 1024)  # more than the agent's and the host's windows
    with Sanbox(live_server.url, live_server.key) as client:
        computer = client.computers.create(name="relay")
        with computer.ssh_stream() as stream:

            def send() -> None:
                for i in range(0, len(payload), 100_000):
                    stream.send(payload[i : i + 100_000])
                stream.send_eof()

            sender = threading.Thread(target=send)
            sender.start()
            got = bytearray()
            while chunk := stream.recv():  # b"" once the guest side ended (the echo saw EOF)
                got += chunk
            sender.join(10)
        assert bytes(got) == payload
    args = (ssh_root / "sshd-args").read_text().splitlines()
    assert args == ["-i -e", "ready"]  # inetd mode, log to stderr; host key and privsep dir first


def proxy(
    live_server: LiveServer,
    name: str,
    data: bytes,
    key: str | None = None,
    url: str | None = None,
) -> tuple[int, bytes, bytes]:
    """`sanbox ssh-proxy NAME` as ssh runs it (its fast path), and through the typer app
    (SANBOX_CLI_EAGER=1): the same exit, stdout and stderr."""
    env = {
        **os.environ,
        "SANBOX_URL": url or live_server.url,
        "SANBOX_API_KEY": key or live_server.key,
    }
    fast, typed = (
        subprocess.run(
            [str(BIN), "ssh-proxy", name],
            input=data,
            env={**env, "SANBOX_CLI_EAGER": eager},
            capture_output=True,
            timeout=60,
        )
        for eager in ("", "1")
    )
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        typed.returncode,
        typed.stdout,
        typed.stderr,
    )
    return fast.returncode, fast.stdout, fast.stderr


def test_ssh_proxy_pipes_stdin_and_stdout_and_says_why_it_cannot(
    live_server: LiveServer, ssh_root: Path
) -> None:
    with Sanbox(live_server.url, live_server.key) as client:
        client.computers.create(name="proxied")
    data = b"SSH-2.0-OpenSSH_9.2\r\n" + os.urandom(300_000)
    assert proxy(live_server, "proxied", data) == (0, data, b"")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, never listening
        refusals = {
            "unauthorized": proxy(live_server, "proxied", b"x", key="sbk_wrong"),
            "computer_not_found": proxy(live_server, "nope", b"x"),
            "connection_failed": proxy(live_server, "proxied", b"x", url=nobody),
        }
    (ssh_root / "usr/sbin/sshd").chmod(0o644)  # an image without sshd
    refusals["ssh_unavailable"] = proxy(live_server, "proxied", b"x")
    for code, (exit_code, out, err) in refusals.items():
        lines = err.decode().strip().splitlines()
        assert exit_code == 1 and out == b"", (code, err)
        assert len(lines) == 1 and code in lines[0], lines


def test_ssh_proxy_runs_without_the_command_line_framework(
    live_server: LiveServer, ssh_root: Path
) -> None:
    """It did run the fast way (a fallback to the usual way would pass the test above too)."""
    with Sanbox(live_server.url, live_server.key) as client:
        client.computers.create(name="light")
    env = {**os.environ, "SANBOX_URL": live_server.url, "SANBOX_API_KEY": live_server.key}
    argv = [sys.executable, "-c", LOADED, "ssh-proxy", "light"]
    done = subprocess.run(argv, input=b"hi", env=env, capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"hi", b"False False False\n")


def test_ssh_config_makes_a_key_lets_it_in_and_records_the_host_key(
    live_server: LiveServer, ssh_root: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANBOX_URL", live_server.url)
    monkeypatch.setenv("SANBOX_API_KEY", live_server.key)
    monkeypatch.setenv("SANBOX_CONFIG", str(short_tmp / "cfg" / "config.toml"))
    with Sanbox(live_server.url, live_server.key) as client:
        client.computers.create(name="conf")
    runner = CliRunner()
    first = runner.invoke(app, ["ssh-config", "conf"])
    assert first.exit_code == 0, first.output
    files = short_tmp / "cfg" / "ssh"
    identity, known_hosts = files / "id_ed25519", files / "known_hosts"
    assert "Host sanbox-conf\n" in first.stdout
    assert f"IdentityFile {identity}\n" in first.stdout
    assert f"UserKnownHostsFile {known_hosts}\n" in first.stdout
    assert "ProxyCommand " in first.stdout and " ssh-proxy %h\n" in first.stdout
    assert (mode(files), mode(identity), mode(known_hosts)) == (0o700, 0o600, 0o600)
    public = (files / "id_ed25519.pub").read_text().strip()
    assert (ssh_root / "root/.ssh/authorized_keys").read_text() == public + "\n"
    host_key = (ssh_root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
    assert known_hosts.read_text() == f"sanbox-conf {host_key[0]} {host_key[1]}\n"

    second = runner.invoke(app, ["ssh-config", "conf"])  # the same key, one entry
    assert second.exit_code == 0 and second.stdout == first.stdout
    assert (files / "id_ed25519.pub").read_text().strip() == public
    assert known_hosts.read_text() == f"sanbox-conf {host_key[0]} {host_key[1]}\n"
    block = files / "block"
    block.write_text(second.stdout)
    resolved = subprocess.run(
        ["ssh", "-G", "-F", str(block), "sanbox-conf"], capture_output=True, text=True, check=True
    ).stdout
    assert "hostkeyalias sanbox-conf" in resolved and "stricthostkeychecking true" in resolved
    # as a user's ~/.ssh/config takes it: the Include the command says, at the top, wins over
    # the user's own `Host *` (ssh takes the first value it meets for each setting)
    include = next(line for line in second.stderr.splitlines() if "Include " in line)
    include = include.split("`")[1]
    assert (files / "sanbox-conf.config").read_text() == second.stdout
    user = files / "user_config"
    user.write_text(
        f"{include}\n\nHost *\n  ForwardAgent yes\n  ForwardX11 yes\n  IdentitiesOnly no\n"
        "  StrictHostKeyChecking accept-new\n  UserKnownHostsFile ~/.ssh/known_hosts\n"
        "  UpdateHostKeys yes\n"
    )
    taken = subprocess.run(
        ["ssh", "-G", "-F", str(user), "sanbox-conf"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for setting in (
        "forwardagent no",
        "forwardx11 no",
        "identitiesonly yes",
        "stricthostkeychecking true",
        f"userknownhostsfile {known_hosts}",
        "updatehostkeys false",
    ):
        assert setting in taken, (setting, taken)


def test_the_host_key_is_made_once_and_made_anew_on_request(ssh_root: Path) -> None:
    """The guest control calls a fork or a pool claim will use for a new SSH identity: a new
    identity forgets the key, the next ask makes one, `new_host_key` replaces it."""
    socket_path = ssh_root / "agent.sock"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    agent = subprocess.Popen(
        [sys.executable, "-m", "sanbox.guest.agent", "--unix", str(socket_path)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    async def scenario() -> tuple[str, str, str, list[str]]:
        async with AgentClient.connect(str(socket_path)) as client:
            made, found = await asyncio.gather(client.ssh.host_key(), client.ssh.host_key())
            # a copy's new identity forgets the key; the next that asks makes another
            await client.new_identity("copy", "0123456789abcdef" * 2, bytes(64), time.time())
            assert not [n for n in os.listdir(ssh_root / "etc/ssh") if n.startswith("ssh_host_")]
            renewed = await client.ssh.host_key()
            assert renewed != made and renewed == await client.ssh.host_key()
            (ssh_root / "etc/ssh/ssh_host_rsa_key").write_text("an old key of another kind")
            fresh = await client.ssh.new_host_key()
            assert fresh != renewed
            with pytest.raises(RemoteError) as bad:
                await client.ssh.connect({"NOT A NAME": "x"})  # refused before sshd starts
            assert bad.value.code == "bad_request"
            (ssh_root / "usr/sbin/sshd").unlink()
            with pytest.raises(RemoteError) as info:
                await client.ssh.connect()
            assert info.value.code == "ssh_unavailable"
            return made, found, fresh, sorted(os.listdir(ssh_root / "etc/ssh"))

    try:
        made, found, fresh, files = asyncio.run(scenario())
    finally:
        agent.kill()
        agent.wait()
    assert made == found and fresh != made
    assert fresh == (ssh_root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().strip()
    assert files == ["ssh_host_ed25519_key", "ssh_host_ed25519_key.pub"]

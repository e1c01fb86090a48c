"""Standard SSH into real guests through the real server: OpenSSH's own ssh, scp, sftp and rsync
via `sanbox ssh-proxy` (the ProxyCommand `sanbox ssh-config` writes), port forwarding as VS Code
Remote-SSH uses it; refused with another key pair or another API key; each computer its own host
key, checked strictly; and no sshd listening in any guest."""

from __future__ import annotations

import filecmp
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sanbox import Sanbox
from sanbox.host.runtime import Machine
from sanbox.sdk import Computer

from .server import BIN, ServerProcess

pytestmark = [
    pytest.mark.vm,
    pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's client"),
]
SSH_TIMEOUT = 180


@dataclass
class SshUser:
    """A user of the tier's server with a Sanbox config folder of their own (never ~/.config)."""

    server: ServerProcess
    home: Path

    def env(self, api_key: str | None = None) -> dict[str, str]:
        return {
            **os.environ,
            "SANBOX_URL": self.server.url,
            "SANBOX_API_KEY": api_key or self.server.key,
            "SANBOX_CONFIG": str(self.home / "config.toml"),
        }

    def sanbox(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN), *args], env=self.env(), capture_output=True, text=True, timeout=SSH_TIMEOUT
        )

    def config(self, name: str) -> Path:
        """`sanbox ssh-config NAME`, saved as a file for `ssh -F`."""
        done = self.sanbox("ssh-config", name)
        assert done.returncode == 0, done.stderr
        path = self.home / f"{name}.ssh_config"
        path.write_text(done.stdout)
        return path

    def run(
        self,
        program: str,
        *args: str,
        api_key: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [program, *args],
            env=self.env(api_key),
            capture_output=True,
            text=True,
            timeout=SSH_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )

    def ssh(
        self,
        config: Path,
        name: str,
        *args: str,
        api_key: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return self.run(
            "ssh",
            "-F",
            str(config),
            "-o",
            "BatchMode=yes",
            f"sanbox-{name}",
            *args,
            api_key=api_key,
        )


@pytest.fixture(scope="module")
def user(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> SshUser:
    return SshUser(server, tmp_path_factory.mktemp("ssh-user"))


@dataclass
class Box:
    computer: Computer
    etc_ssh_before: str  # /etc/ssh's listing before anyone asked for SSH
    listening_before: str
    config: Path


# values sshd's configuration parser would split or cut short if they were not quoted
AWKWARD_ENV = {
    "SBX_GREETING": 'he said "hi" \\ $HOME # not a comment',
    "SBX_LINES": "line one\nline 'two'",
    "SBX_SMUGGLE": 'x" "LD_PRELOAD=/tmp/evil.so',
}


@pytest.fixture(scope="module")
def boxes(client: Sanbox, user: SshUser) -> Iterator[dict[str, Box]]:
    made: dict[str, Box] = {}
    for name in ("ssh-a", "ssh-b"):
        env = AWKWARD_ENV if name == "ssh-a" else None
        c = client.computers.create(name=name, idle_timeout=0, env=env)
        before = c.exec("ls -a /etc/ssh").stdout
        listening = c.exec("ss -Hltn").stdout
        made[name] = Box(c, before, listening, user.config(name))
    yield made
    for box in made.values():
        box.computer.delete()


def test_no_image_carries_a_host_key_and_no_sshd_listens(boxes: dict[str, Box]) -> None:
    for box in boxes.values():
        assert "ssh_host_" not in box.etc_ssh_before and "sshd_config.d" in box.etc_ssh_before
        assert box.listening_before.strip() == ""
    keys = [
        box.computer.exec("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout for box in boxes.values()
    ]
    assert keys[0] != keys[1]  # each computer its own identity
    dump = boxes["ssh-a"].computer.exec("mkdir -p /run/sshd && /usr/sbin/sshd -T")
    assert dump.exit_code == 0, dump.stderr
    settings = dump.stdout.splitlines()
    assert {"permitrootlogin without-password", "permitrootlogin prohibit-password"} & set(settings)
    assert "passwordauthentication no" in settings and "kbdinteractiveauthentication no" in settings
    assert [s for s in settings if s.startswith("hostkey ")] == [
        "hostkey /etc/ssh/ssh_host_ed25519_key"
    ]


def test_ssh_runs_commands_with_their_exit_codes(user: SshUser, boxes: dict[str, Box]) -> None:
    box = boxes["ssh-a"]
    done = user.ssh(box.config, "ssh-a", "uname", "-a")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Linux ssh-a ")
    assert user.ssh(box.config, "ssh-a", "exit 3").returncode == 3
    via_cli = user.sanbox("ssh", "ssh-b", "--", "-o", "BatchMode=yes", "cat /etc/hostname")
    assert (via_cli.returncode, via_cli.stdout) == (0, "ssh-b\n"), via_cli.stderr


def test_ssh_sessions_get_the_computers_environment(
    client: Sanbox, user: SshUser, boxes: dict[str, Box]
) -> None:
    """As its commands do: the variables it was created with, byte for byte, and a bound secret's
    placeholder with the variables that make tools trust the proxy's CA."""
    client.secrets.set("ssh-env-key", "the-real-value", hosts=["echo.test"])
    binding = client.secrets.bind("ssh-env-key", "ssh-a", env="SBX_KEY")
    try:
        script = (
            'for n in SBX_GREETING SBX_LINES SBX_SMUGGLE; do printf "%s\\0" "$(printenv $n)"; done'
        )
        done = user.ssh(boxes["ssh-a"].config, "ssh-a", script)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\0")[:3] == list(AWKWARD_ENV.values())
        done = user.ssh(boxes["ssh-a"].config, "ssh-a", "env")
        lines = set(done.stdout.splitlines())
        assert f"SBX_KEY={binding.placeholder}" in lines and "the-real-value" not in done.stdout
        assert "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" in lines, done.stdout
        assert not any(line.startswith("LD_PRELOAD=") for line in lines)
        other = user.ssh(boxes["ssh-b"].config, "ssh-b", "env").stdout
        assert "SBX_" not in other and "sbx_ph_" not in other
    finally:
        client.secrets.delete("ssh-env-key")


def test_scp_and_sftp_copy_in_and_out(
    user: SshUser,
    boxes: dict[str, Box],
    tmp_path: Path,
) -> None:
    cfg = str(boxes["ssh-a"].config)
    local = tmp_path / "payload.bin"
    local.write_bytes(os.urandom(2 * 1024 * 1024 + 17))
    for flags in ([], ["-O"]):  # SFTP underneath (the default), and the old scp protocol
        up = user.run(
            "scp",
            "-F",
            cfg,
            "-o",
            "BatchMode=yes",
            *flags,
            str(local),
            "sanbox-ssh-a:/root/payload.bin",
        )
        assert up.returncode == 0, up.stderr
        back = tmp_path / f"back{len(flags)}.bin"
        down = user.run(
            "scp",
            "-F",
            cfg,
            "-o",
            "BatchMode=yes",
            *flags,
            "sanbox-ssh-a:/root/payload.bin",
            str(back),
        )
        assert down.returncode == 0, down.stderr
        assert back.read_bytes() == local.read_bytes()
    batch = tmp_path / "batch"
    got = tmp_path / "sftp-back.bin"
    batch.write_text(f"put {local} /root/sftp.bin\nget /root/sftp.bin {got}\nls -l /root\n")
    done = user.run("sftp", "-F", cfg, "-o", "BatchMode=yes", "-b", str(batch), "sanbox-ssh-a")
    assert done.returncode == 0, done.stderr
    assert got.read_bytes() == local.read_bytes() and "sftp.bin" in done.stdout
    digest = boxes["ssh-a"].computer.exec("sha256sum /root/sftp.bin /root/payload.bin").stdout
    assert len({line.split()[0] for line in digest.splitlines()}) == 1


@pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")
def test_rsync_over_ssh_copies_a_tree(user: SshUser, boxes: dict[str, Box], tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub" / "deeper").mkdir(parents=True)
    (tree / "a.txt").write_text("alpha\n")
    (tree / "sub" / "b.bin").write_bytes(os.urandom(300_000))
    (tree / "sub" / "deeper" / "c.txt").write_text("gamma\n")
    shell = f"ssh -F {boxes['ssh-a'].config} -o BatchMode=yes"
    up = user.run("rsync", "-a", "-e", shell, f"{tree}/", "sanbox-ssh-a:/root/tree/")
    assert up.returncode == 0, up.stderr
    back = tmp_path / "back"
    down = user.run("rsync", "-a", "-e", shell, "sanbox-ssh-a:/root/tree/", f"{back}/")
    assert down.returncode == 0, down.stderr
    compared = filecmp.dircmp(tree, back)
    assert not (compared.left_only or compared.right_only or compared.diff_files)
    assert filecmp.cmp(tree / "sub" / "b.bin", back / "sub" / "b.bin", shallow=False)
    assert (back / "sub" / "deeper" / "c.txt").read_text() == "gamma\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except (httpx.HTTPError, OSError):
            result = None
        if result:
            return result
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout} s"
        time.sleep(0.3)


def test_local_port_forwarding_reaches_a_guest_port(user: SshUser, boxes: dict[str, Box]) -> None:
    """What VS Code Remote-SSH does with its server in the guest: `ssh -L` through sshd."""
    c = boxes["ssh-a"].computer
    c.exec("mkdir -p /root/www && echo 'forwarded from the guest' > /root/www/hello.txt")
    c.exec(
        "cd /root/www && setsid nohup python3 -m http.server 8123 --bind 127.0.0.1 "
        ">/dev/null 2>&1 &"
    )
    c.exec("for i in $(seq 150); do ss -ltn | grep -q :8123 && break; sleep 0.2; done")
    port = free_port()
    tunnel = subprocess.Popen(
        [
            "ssh",
            "-F",
            str(boxes["ssh-a"].config),
            "-o",
            "BatchMode=yes",
            "-o",
            "ExitOnForwardFailure=yes",
            "-N",
            "-L",
            f"127.0.0.1:{port}:127.0.0.1:8123",
            "sanbox-ssh-a",
        ],
        env=user.env(),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def fetch() -> str | None:
            assert tunnel.poll() is None, tunnel.stderr.read() if tunnel.stderr else ""
            r = httpx.get(f"http://127.0.0.1:{port}/hello.txt", timeout=30)
            return r.text if r.status_code == 200 else None

        assert wait_for(fetch, SSH_TIMEOUT, "the forwarded port answering") == (
            "forwarded from the guest\n"
        )
        assert fetch() == "forwarded from the guest\n"  # a second connection on the same tunnel
    finally:
        tunnel.terminate()
        tunnel.communicate(timeout=30)  # reaps it and closes its stderr pipe


def test_another_key_pair_is_refused(user: SshUser, boxes: dict[str, Box], tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    identity = f"IdentityFile {user.home / 'ssh' / 'id_ed25519'}"
    config = boxes["ssh-a"].config.read_text()
    assert identity in config
    forged = tmp_path / "forged.ssh_config"
    forged.write_text(config.replace(identity, f"IdentityFile {other}"))
    done = user.ssh(forged, "ssh-a", "true")
    assert done.returncode == 255 and "Permission denied (publickey)" in done.stderr, done.stderr


def test_another_api_key_is_refused_by_the_proxy(user: SshUser, boxes: dict[str, Box]) -> None:
    done = user.ssh(boxes["ssh-a"].config, "ssh-a", "true", api_key="sbk_not-a-key")
    assert done.returncode == 255 and "unauthorized" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_host_key_that_does_not_match_is_refused(
    user: SshUser, boxes: dict[str, Box], tmp_path: Path
) -> None:
    """A computer answering with another computer's identity is not trusted (StrictHostKeyChecking
    against the known_hosts file Sanbox keeps)."""
    known = (user.home / "ssh" / "known_hosts").read_text().splitlines()
    entries = {line.split()[0]: line.split(maxsplit=1)[1] for line in known}
    assert set(entries) == {"sanbox-ssh-a", "sanbox-ssh-b"}
    assert entries["sanbox-ssh-a"] != entries["sanbox-ssh-b"]
    swapped = tmp_path / "swapped_known_hosts"
    swapped.write_text(f"sanbox-ssh-a {entries['sanbox-ssh-b']}\n")
    config = boxes["ssh-a"].config.read_text()
    forged = tmp_path / "swapped.ssh_config"
    forged.write_text(config.replace(str(user.home / "ssh" / "known_hosts"), str(swapped)))
    done = user.ssh(forged, "ssh-a", "true")
    assert done.returncode == 255 and "Host key verification failed" in done.stderr, done.stderr


def test_ssh_wakes_a_suspended_computer(user: SshUser, boxes: dict[str, Box]) -> None:
    c = boxes["ssh-b"].computer
    c.update(idle_timeout=2)
    wait_for(lambda: c.refresh().state == "suspended", 60, "suspending")
    c.update(idle_timeout=0)
    done = user.ssh(boxes["ssh-b"].config, "ssh-b", "echo awake")
    assert (done.returncode, done.stdout) == (0, "awake\n"), done.stderr
    assert c.refresh().state == "running"


def test_the_agent_makes_a_new_host_key_on_request(
    machine: Machine,
    run: Callable[..., Any],
) -> None:
    """The control call a fork or a pool claim will use for a new SSH identity; sshd answers with
    the new key at once."""
    agent = machine.agent
    first = run(agent.ssh.host_key())
    assert run(agent.ssh.host_key()) == first
    fresh = run(agent.ssh.new_host_key())
    assert fresh != first and fresh.startswith("ssh-ed25519 ")
    listing = run(agent.exec("ls /etc/ssh; cat /etc/ssh/ssh_host_ed25519_key.pub"))
    assert fresh in listing.stdout.decode()
    assert listing.stdout.decode().count("ssh_host_") == 2  # the ed25519 pair, nothing else

    async def banner() -> bytes:
        stream = await agent.ssh.connect()
        try:
            await stream.write(b"SSH-2.0-probe\r\n")
            return await stream.read(timeout=60)
        finally:
            await stream.close()

    assert run(banner()).startswith(b"SSH-2.0-OpenSSH_")

"""SSH access, the pure parts: the config block the CLI prints, the known_hosts it keeps, and the
public keys the API lets into a computer's authorized_keys (an attacker's chance to smuggle
options or a second key into root's login)."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import pytest

from sanbox.cli.ssh_files import host_alias, known_hosts_with, render_config
from sanbox.control.errors import InvalidRequestError
from sanbox.control.names import check_public_key
from sanbox.guest.ssh import key_identity, public_key_problem

pytestmark = pytest.mark.unit


def key_line(kind: str = "ssh-ed25519", comment: str = "me@laptop", body: bytes = b"k" * 32) -> str:
    blob = struct.pack(">I", len(kind)) + kind.encode() + struct.pack(">I", len(body)) + body
    return f"{kind} {base64.b64encode(blob).decode()} {comment}".rstrip()


def test_the_config_block_proxies_through_sanbox_and_checks_the_host_key_strictly() -> None:
    block = render_config(
        "box-1",
        ["/opt/my tools/sanbox"],
        Path("/home/u/.config/sanbox/ssh/id_ed25519"),
        Path("/home/u/.config/sanbox/ssh/known_hosts"),
    )
    lines = [line.strip() for line in block.splitlines()]
    assert lines[1] == "Host sanbox-box-1"
    assert "HostName box-1" in lines and "User root" in lines
    assert "ProxyCommand '/opt/my tools/sanbox' ssh-proxy %h" in lines  # for the shell, as is
    assert "IdentityFile /home/u/.config/sanbox/ssh/id_ed25519" in lines
    assert "IdentitiesOnly yes" in lines
    assert "UserKnownHostsFile /home/u/.config/sanbox/ssh/known_hosts" in lines
    assert "HostKeyAlias sanbox-box-1" in lines
    assert "StrictHostKeyChecking yes" in lines
    # the guest is not trusted with the user's agent, display or known_hosts
    assert {"ForwardAgent no", "ForwardX11 no", "UpdateHostKeys no"} <= set(lines)
    assert block.endswith("\n")


def test_percent_signs_in_paths_are_not_expanded_by_ssh() -> None:
    block = render_config("box", ["/opt/50%p/sanbox"], Path("/tmp/100%h/key"), Path("/tmp/kh"))
    assert "IdentityFile /tmp/100%%h/key" in block
    assert "ProxyCommand /opt/50%%p/sanbox ssh-proxy %h" in block


@pytest.mark.parametrize("name", ["Box", "box\nHost *", "a b", "", "-x", "x" * 64])
def test_a_name_that_could_inject_config_lines_is_refused(name: str) -> None:
    with pytest.raises(ValueError):
        render_config(name, ["sanbox"], Path("/k"), Path("/kh"))


def test_known_hosts_replaces_only_the_computers_own_entry() -> None:
    before = (
        "sanbox-box ssh-ed25519 OLD\n"
        "github.com ssh-ed25519 GH\n"
        "sanbox-box2 ssh-ed25519 OTHER\n"
        "sanbox-box,alias ssh-rsa ALSO-OLD\n"
    )
    after = known_hosts_with(before, host_alias("box"), "ssh-ed25519 NEW sanbox")
    assert after.splitlines() == [
        "github.com ssh-ed25519 GH",
        "sanbox-box2 ssh-ed25519 OTHER",
        "sanbox-box ssh-ed25519 NEW",
    ]
    assert known_hosts_with("", "sanbox-x", "ssh-ed25519 K") == "sanbox-x ssh-ed25519 K\n"


@pytest.mark.parametrize(
    "kind", ["ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "sk-ssh-ed25519@openssh.com"]
)
def test_public_keys_of_each_kind_are_accepted(kind: str) -> None:
    line = key_line(kind)
    assert public_key_problem(line) is None
    assert public_key_problem(key_line(kind, comment="")) is None
    assert check_public_key(line) == line


@pytest.mark.parametrize(
    "attack",
    [
        'command="/bin/sh -c evil" ' + key_line(),  # options before the key
        'from="*" ' + key_line(),
        key_line() + "\n" + key_line(comment="second"),  # a second key line
        key_line() + "\n",
        key_line(comment="a\rb"),
        key_line(comment="nul\x00"),
        "ssh-ed25519 !!!notbase64!!!",
        "ssh-ed25519",
        "ssh-dss " + key_line().split()[1],  # not a kind sshd accepts
        key_line("ssh-rsa").replace("ssh-rsa", "ssh-ed25519", 1),  # the blob says otherwise
        " " + key_line(),
        "",
        key_line(comment="x" * 20_000),
    ],
)
def test_anything_but_one_plain_key_line_is_refused(attack: str) -> None:
    assert public_key_problem(attack) is not None
    with pytest.raises(InvalidRequestError) as info:
        check_public_key(attack)
    assert info.value.code == "invalid_public_key"


def test_a_key_is_recognised_in_authorized_keys_whatever_its_options_and_comment() -> None:
    line = key_line(comment="one")
    kind, blob = line.split()[:2]
    assert key_identity(line) == (kind, blob)
    assert key_identity(f'restrict,command="x" {kind} {blob} other comment') == (kind, blob)
    assert key_identity("# a comment") is None


@pytest.mark.parametrize(
    ("answered", "host_key"),
    [
        ("box\nHost *\n  ProxyCommand touch /tmp/pwned", "ssh-ed25519 AAAA"),
        ("box", "not-a-key"),
    ],
)
def test_a_servers_answer_that_is_no_name_or_key_writes_nothing(
    tmp_path: Path, answered: str, host_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sanbox ssh NAME`: the name and host key the server answers are checked before
    known_hosts is written (a hostile server's name injected lines there, then a traceback)."""
    from sanbox.cli.ssh_files import SshFiles, prepare

    files = SshFiles(tmp_path)
    files.identity.write_text("private")
    files.identity.with_name("id_ed25519.pub").write_text(key_line())
    with pytest.raises(SystemExit) as ended:
        prepare("box", files, lambda name, public: (answered, host_key))
    assert ended.value.code == 1
    assert not files.known_hosts.exists()
    said = capsys.readouterr().err.strip()
    assert said.startswith("error (invalid_answer) the server's answer for box cannot go in")
    assert len(said.splitlines()) == 1

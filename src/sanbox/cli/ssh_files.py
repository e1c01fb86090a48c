"""This user's SSH files for the computers (`~/.config/sanbox/ssh/`, beside the CLI's config
file: a key pair, known_hosts, a config block per computer) and what `sanbox ssh` and
`sanbox ssh-config` do with them, whichever way they run: the typer commands (sanbox.cli.ssh)
and the quick ones (sanbox.cli.quick_ssh) differ only in how they ask the API to let the key in
(`Authorize`). No typer here."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

Authorize = Callable[[str, str], tuple[str, str]]
"""(computer, public key line) -> (the computer's name, its host key): the key let in to log in
as root (a suspended computer is woken for it)."""

ALIAS_PREFIX = "sanbox-"
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


# -- pure: the config block and known_hosts -------------------------------------------------------


def host_alias(name: str) -> str:
    """The `Host` an ssh config block names a computer by (`sanbox-NAME`: no clash with the
    user's own hosts)."""
    return ALIAS_PREFIX + name


def _config_word(value: str) -> str:
    """One ssh_config argument: `%` escaped (ssh expands `%h` and such), quoted if it has spaces."""
    if '"' in value or "\n" in value:
        raise ValueError(f"cannot put {value!r} in an ssh config file")
    value = value.replace("%", "%%")
    return f'"{value}"' if any(c.isspace() for c in value) else value


def render_config(name: str, proxy: list[str], identity: Path, known_hosts: Path) -> str:
    """The OpenSSH config block for computer `name`, for `ssh -F FILE` or `~/.ssh/config`.

    `proxy` is the argv that runs the `sanbox` command (the ProxyCommand appends `ssh-proxy %h`).
    The host key is checked strictly against `known_hosts` under the alias, which
    `sanbox ssh-config` keeps current."""
    if _NAME.fullmatch(name) is None:
        raise ValueError(f"not a computer name: {name!r}")
    alias = host_alias(name)
    command = " ".join(shlex.quote(arg) for arg in proxy)
    return "\n".join(
        [
            f"# Sanbox computer {name}: written by `sanbox ssh-config {name}`",
            f"Host {alias}",
            f"  HostName {name}",
            "  User root",
            # the rest of the line, as is
            f"  ProxyCommand {command.replace('%', '%%')} ssh-proxy %h",
            f"  IdentityFile {_config_word(str(identity))}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {_config_word(str(known_hosts))}",
            f"  HostKeyAlias {alias}",
            "  StrictHostKeyChecking yes",
            # the guest is not trusted: none of this user's agent keys or X display reach it,
            # and its sshd adds no host key of its own choosing to known_hosts
            "  ForwardAgent no",
            "  ForwardX11 no",
            "  UpdateHostKeys no",
            "",
        ]
    )


def include_line(files_dir: Path) -> str:
    """The line that takes every computer's block into `~/.ssh/config`. ssh takes the first
    value it meets for each setting, so it goes at the top, before any `Host` section: after a
    `Host *` that forwards the agent or trusts new host keys, those would win over the block's."""
    return f"Include {_config_word(str(files_dir))}/*.config"


def known_hosts_with(text: str, alias: str, host_key: str) -> str:
    """`text` (a known_hosts file) with `alias`'s entry replaced by `host_key` (its type and key;
    the comment is dropped). Other entries stay as they were."""
    fields = host_key.split()
    if len(fields) < 2:
        raise ValueError(f"not a public key line: {host_key!r}")
    kept = [
        line
        for line in text.splitlines()
        if not line.strip() or alias not in line.split(maxsplit=1)[0].split(",")
    ]
    kept.append(f"{alias} {fields[0]} {fields[1]}")
    return "\n".join(line for line in kept if line.strip()) + "\n"


def sanbox_command() -> list[str]:
    """How ssh should run this `sanbox`: the script that is running, else the one on PATH."""
    argv0 = sys.argv[0]
    if os.path.basename(argv0) == "sanbox" and os.access(argv0, os.X_OK):
        return [os.path.abspath(argv0)]
    found = shutil.which("sanbox")
    return [found] if found else ["sanbox"]


# -- this user's SSH files ------------------------------------------------------------------------


@dataclass(frozen=True)
class SshFiles:
    """`~/.config/sanbox/ssh/` (beside the CLI's config file): key pair, known_hosts, configs."""

    dir: Path

    @classmethod
    def default(cls) -> SshFiles:
        from ..sdk.config import config_path

        return cls(config_path().parent / "ssh")

    @property
    def identity(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    def config_for(self, name: str) -> Path:
        return self.dir / f"{name}.config"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One `sanbox` at a time changes these files."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def public_key(self) -> str:
        """This user's public key line, the key pair made first if there is none."""
        pub = self.identity.with_name(self.identity.name + ".pub")
        if not (self.identity.exists() and pub.exists()):
            keygen = shutil.which("ssh-keygen")
            if keygen is None:
                from ._output import fail

                fail("ssh_unavailable", "ssh-keygen not found: install OpenSSH's client")
            for path in (self.identity, pub):
                path.unlink(missing_ok=True)
            subprocess.run(
                [keygen, "-q", "-t", "ed25519", "-N", "", "-C", "sanbox", "-f", str(self.identity)],
                check=True,
                stdin=subprocess.DEVNULL,
                capture_output=True,
            )
            print(f"made the SSH key {self.identity}", file=sys.stderr)
        self.identity.chmod(0o600)
        return pub.read_text().strip()

    def write(self, path: Path, text: str) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(text)
        os.replace(tmp, path)

    def remember(self, alias: str, host_key: str) -> None:
        try:
            text = self.known_hosts.read_text()
        except FileNotFoundError:
            text = ""
        self.write(self.known_hosts, known_hosts_with(text, alias, host_key))


def prepare(name: str, files: SshFiles, authorize: Authorize) -> tuple[str, str]:
    """Let this user's key into computer `name` and record its host key: (alias, config block).
    What the server answered is checked before anything is written: a name or a key that is
    not one (lines for known_hosts, say) is a one-line error, and the files stay as they were."""
    with files.locked():
        public = files.public_key()
    computer, host_key = authorize(name, public)
    try:
        block = render_config(computer, sanbox_command(), files.identity, files.known_hosts)
        alias = host_alias(computer)
        with files.locked():
            files.remember(alias, host_key)
    except ValueError as exc:
        from ._output import fail

        fail("invalid_answer", f"the server's answer for {name} cannot go in ssh's files: {exc}")
    return alias, block


def give_config(files: SshFiles, alias: str, block: str) -> None:
    """`sanbox ssh-config`: the block written to its file and printed; on stderr, the Include
    line that takes it into `~/.ssh/config` and where it goes."""
    path = files.config_for(alias)
    files.write(path, block)
    sys.stdout.write(block)
    print(
        f"written to {path}; put `{include_line(files.dir)}` at the top of ~/.ssh/config "
        f"(before any Host line), then `ssh {alias}`",
        file=sys.stderr,
    )


def login(files: SshFiles, alias: str, block: str, args: list[str]) -> NoReturn:
    """Write the computer's config block and become `ssh -F BLOCK ALIAS ARGS...`."""
    path = files.config_for(alias)
    files.write(path, block)
    program = shutil.which("ssh")
    if program is None:
        from ._output import fail

        fail("ssh_unavailable", "ssh not found: install OpenSSH's client")
    sys.stdout.flush()
    os.execv(program, ["ssh", "-F", str(path), alias, *args])

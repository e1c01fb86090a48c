"""SSH into the guest: ``ssh`` streams and the files behind them.

An ``ssh`` stream runs ``sshd -i`` (inetd mode: one sshd per connection, no port listening in the
guest) with its stdin and stdout as the stream's bytes, like an exec without a terminal. sshd's
log (``-e``) goes to the agent's stderr, the console. The stream's ``env`` (the computer's own
variables, as an exec gets them) reaches every session of the connection through sshd's
``SetEnv``. sshd's configuration comes with the image
(``assets/sshd_config``: root by key only, no passwords, this host key).

The host key is ed25519 only (quick to make under emulation; every OpenSSH since 6.5 speaks it).
No image carries one: the first ``ssh`` stream or ``ssh_host_key`` control call makes it with
``ssh-keygen`` (later ones find it). ``new_host_key`` deletes every host key and makes a new one,
for a computer that must not share its identity with the one it was copied from (a fork, a pool
member); connections already open keep the key they started with.

Outside a VM (the component tier runs the agent as a local process) every path here lives under
``$SANBOX_AGENT_SSH_ROOT`` instead of ``/``.
"""

from __future__ import annotations

import asyncio
import binascii
import os
import struct
import subprocess
import threading
from dataclasses import dataclass

from . import protocol as p
from .accounts import BASE_PATH
from .errors import AgentRequestError
from .process import ProcessStream, spawn_piped
from .service_config import ENV_NAME

ROOT_ENV = "SANBOX_AGENT_SSH_ROOT"
KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)
MAX_KEY_LINE = 16 * 1024
KEYGEN_TIMEOUT = 60.0
_keygen = threading.Lock()


@dataclass(frozen=True)
class SshPaths:
    root: str = "/"

    def _at(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    @property
    def sshd(self) -> str:
        return self._at("/usr/sbin/sshd")

    @property
    def config_dir(self) -> str:
        return self._at("/etc/ssh")

    @property
    def host_key(self) -> str:
        return self._at("/etc/ssh/ssh_host_ed25519_key")

    @property
    def privsep_dir(self) -> str:
        return self._at("/run/sshd")

    @property
    def authorized_keys(self) -> str:
        return self._at("/root/.ssh/authorized_keys")


def paths() -> SshPaths:
    return SshPaths(os.environ.get(ROOT_ENV) or "/")


# -- public keys (pure) ---------------------------------------------------------------------------


def public_key_problem(text: object) -> str | None:
    """Why ``text`` is not one OpenSSH public key line ``TYPE BASE64 [COMMENT]`` (``None`` if it
    is). No options (``command=``, ``from=``), one line, printable, the blob's own type matching."""
    if not isinstance(text, str) or not text:
        return "a public key must be a non-empty string"
    if len(text) > MAX_KEY_LINE:
        return f"a public key line must be at most {MAX_KEY_LINE} characters"
    if not text.isprintable():
        return "a public key must be one line of printable text"
    parts = text.split(" ", 2)
    if len(parts) < 2 or parts[0] not in KEY_TYPES:
        return "not an OpenSSH public key: expected 'TYPE BASE64 [COMMENT]' with TYPE one of " + (
            ", ".join(sorted(KEY_TYPES))
        )
    try:
        blob = binascii.a2b_base64(parts[1], strict_mode=True)
    except binascii.Error:
        return "the public key's data is not base64"
    if len(blob) < 4:
        return "the public key's data is too short"
    (size,) = struct.unpack(">I", blob[:4])
    if blob[4 : 4 + size] != parts[0].encode():
        return f"the public key's data is not a {parts[0]} key"
    return None


def key_identity(line: str) -> tuple[str, str] | None:
    """(type, base64) of an authorized_keys line, options and comment aside; ``None`` if none."""
    tokens = line.split()
    for i, token in enumerate(tokens[:-1]):
        if token in KEY_TYPES:
            return token, tokens[i + 1]
    return None


# -- files (side effects) -------------------------------------------------------------------------


def _write_file(path: str, data: bytes, mode: int) -> None:
    """Replace ``path`` atomically and durably (temp file, fsync, rename)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_public(loc: SshPaths) -> str | None:
    try:
        with open(loc.host_key + ".pub") as f:
            line = f.read().strip()
    except OSError:
        return None
    if not os.path.exists(loc.host_key) or public_key_problem(line) is not None:
        return None  # half made (a crash between the two renames): make it again
    return line


def _generate(loc: SshPaths) -> str:
    os.makedirs(loc.config_dir, 0o755, exist_ok=True)
    tmp = os.path.join(loc.config_dir, f".ssh_host_ed25519_key.{os.getpid()}")
    for leftover in (tmp, tmp + ".pub"):
        if os.path.exists(leftover):
            os.unlink(leftover)
    argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sanbox", "-f", tmp]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env={"PATH": BASE_PATH},
            timeout=KEYGEN_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise AgentRequestError("ssh_unavailable", "ssh-keygen is not installed") from None
    except subprocess.TimeoutExpired:
        raise AgentRequestError("ssh_keygen_failed", "ssh-keygen did not finish") from None
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        raise AgentRequestError("ssh_keygen_failed", f"ssh-keygen: {why}")
    for path in (tmp, tmp + ".pub"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.rename(tmp, loc.host_key)
    os.rename(tmp + ".pub", loc.host_key + ".pub")
    _fsync_dir(loc.config_dir)
    line = _read_public(loc)
    if line is None:
        raise AgentRequestError("ssh_keygen_failed", "ssh-keygen made no usable key")
    return line


def ensure_host_key(loc: SshPaths) -> str:
    """The host's public key line, made first if there is none (blocking: run it in a thread)."""
    with _keygen:
        return _read_public(loc) or _generate(loc)


def regenerate_host_key(loc: SshPaths) -> str:
    """Delete every host key and make a new one: a new SSH identity (blocking)."""
    with _keygen:
        _delete_host_keys(loc)
        return _generate(loc)


def forget_host_key(loc: SshPaths) -> None:
    """Delete every host key (the caller syncs the folder: identity.py): the first that asks
    for one (`host_key`, an SSH connection) makes the new one. A copied computer's identity:
    nothing can present its source's from here on, and ssh-keygen (~0.2 s under TCG) is paid by
    the computers someone connects to, not on every restore, claim and fork before its first
    command. On the agent's loop: a few unlinks (a thread's hop cost a copy's first run ~30 ms);
    a copy whose source was making a key waits for that key, then deletes it."""
    with _keygen:
        _delete_host_keys(loc)


def _delete_host_keys(loc: SshPaths) -> None:
    try:
        names = os.listdir(loc.config_dir)
    except FileNotFoundError:
        names = []
    for name in names:
        if name.startswith("ssh_host_"):
            os.unlink(os.path.join(loc.config_dir, name))


async def host_key(loc: SshPaths | None = None) -> str:
    return await asyncio.get_running_loop().run_in_executor(None, ensure_host_key, loc or paths())


async def new_host_key(loc: SshPaths | None = None) -> str:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, regenerate_host_key, loc or paths())


def authorize(public_key: str, loc: SshPaths | None = None) -> bool:
    """Let ``public_key`` log in as root: append it to root's authorized_keys (directory 0700,
    file 0600) unless it is there already. Returns whether it was added."""
    problem = public_key_problem(public_key)
    if problem is not None:
        raise AgentRequestError("invalid_public_key", problem)
    loc = loc or paths()
    folder = os.path.dirname(loc.authorized_keys)
    try:
        os.makedirs(folder, 0o700, exist_ok=True)
        os.chmod(folder, 0o700)
        try:
            with open(loc.authorized_keys, "rb") as f:
                existing = f.read()
        except FileNotFoundError:
            existing = b""
        wanted = key_identity(public_key)
        lines = existing.decode(errors="replace").splitlines()
        if any(key_identity(line) == wanted for line in lines):
            os.chmod(loc.authorized_keys, 0o600)
            return False
        if existing and not existing.endswith(b"\n"):
            existing += b"\n"
        _write_file(loc.authorized_keys, existing + public_key.encode() + b"\n", 0o600)
    except OSError as exc:
        raise AgentRequestError.from_os_error(exc) from None
    return True


# -- the stream -----------------------------------------------------------------------------------


def set_env_options(env: object) -> list[str]:
    """sshd's ``-o SetEnv`` for ``env``: every pair double-quoted, with ``\\`` and ``"`` escaped
    (sshd splits a configuration line as a shell would, so a value cannot add an option). A
    command-line option comes before sshd_config, whose own SetEnv is then ignored."""
    if env is None or env == {}:
        return []
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and ENV_NAME.fullmatch(k) and isinstance(v, str) and "\0" not in v
        for k, v in env.items()
    ):
        raise AgentRequestError("bad_request", "env must map variable names to strings")
    pairs = (
        f"{name}={value}".replace("\\", "\\\\").replace('"', '\\"')
        for name, value in sorted(env.items())
    )
    return ["-o", "SetEnv " + " ".join(f'"{pair}"' for pair in pairs)]


class SshStream(ProcessStream):
    """``sshd -i -e``: stdin and stdout are the SSH connection's bytes, relayed under the
    stream's flow control like an exec's; stderr (sshd's log) is the agent's own."""

    kind = "ssh"

    async def run(self) -> None:
        set_env_options(self.params.get("env"))  # refused before anything starts
        loc = paths()
        if not os.access(loc.sshd, os.X_OK):
            raise AgentRequestError("ssh_unavailable", f"{loc.sshd} is not installed")
        await host_key(loc)
        os.makedirs(loc.privsep_dir, 0o755, exist_ok=True)  # sshd's privilege separation
        await super().run()

    def start_process(self) -> tuple[int, list[tuple[int, int]]]:
        argv = [paths().sshd, "-i", "-e", *set_env_options(self.params.get("env"))]
        started = spawn_piped(argv, {}, "dumb", channels=(p.STDOUT,))
        self.proc = started.proc
        self._owned_fds.extend(started.fds)
        return started.stdin, started.outputs

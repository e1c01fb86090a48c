"""A new identity for a computer copied from another (a fork, a computer made from a snapshot
with memory): hostname, machine-id, SSH host keys, the kernel's entropy pool fed fresh bytes from
the host and reseeded, the clock set. Processes keep running; only what names the computer
changes.

Its files are written and the old keys deleted on the agent's loop, then their folders synced
once (one journal commit for both) before it answers: the identity is on the disk when the host
hears it was given. Each file synced by itself, and the keys deleted and synced in a thread,
cost a copy's first run two commits and a thread's hop under TCG (~30 ms each, cold).

Outside a VM (the component tier runs the agent as a local process) files live under
``$SANBOX_AGENT_SSH_ROOT`` as for ssh.py, and the kernel calls (sethostname, RNDADDENTROPY) need
root: a host that refuses them raises ``AgentRequestError``.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import os
import re
import struct
from typing import Any

from . import ssh
from .errors import AgentRequestError

RNDADDENTROPY = 0x40085203  # _IOW('R', 0x03, int[2])
RNDRESEEDCRNG = 0x5207  # _IO('R', 0x07)
MAX_ENTROPY = 4096
_MACHINE_ID = re.compile(r"[0-9a-f]{32}")


def entropy_request(data: bytes) -> bytes:
    """The `struct rand_pool_info` RNDADDENTROPY takes: entropy_count (bits), buf_size, buf."""
    return struct.pack("ii", len(data) * 8, len(data)) + data


def decode_entropy(value: object) -> bytes:
    if not isinstance(value, str):
        raise AgentRequestError("bad_request", "entropy must be base64 text")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise AgentRequestError("bad_request", "entropy is not valid base64") from None
    if not 16 <= len(data) <= MAX_ENTROPY:
        raise AgentRequestError("bad_request", f"entropy must be 16 to {MAX_ENTROPY} bytes")
    return data


def check_machine_id(value: object) -> str:
    if not isinstance(value, str) or not _MACHINE_ID.fullmatch(value):
        raise AgentRequestError("bad_request", "machine_id must be 32 lowercase hex digits")
    return value


def add_entropy(data: bytes) -> None:
    """Credit `data` to the kernel's pool and reseed the CRNG, so /dev/urandom in this copy
    diverges from every other copy of the same memory at once."""
    try:
        fd = os.open("/dev/urandom", os.O_WRONLY)
    except OSError as exc:
        raise AgentRequestError.from_os_error(exc, "open /dev/urandom") from None
    try:
        fcntl.ioctl(fd, RNDADDENTROPY, entropy_request(data))
        fcntl.ioctl(fd, RNDRESEEDCRNG)
    except OSError as exc:
        raise AgentRequestError.from_os_error(exc, "RNDADDENTROPY") from None
    finally:
        os.close(fd)


def _write(path: str, text: str) -> None:
    """`text` replaces the file by a rename: a reader (or a crash) finds the old file or the
    new one, never a part (ext4 writes a file renamed over another before the rename's commit).
    Not synced here: `new_identity` syncs its folder."""
    tmp = path + ".sanbox-tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o444)
    os.replace(tmp, path)


def write_machine_id(machine_id: str, root: str = "/") -> list[str]:
    """/etc/machine-id, and D-Bus's copy where there is one. Returns the files written."""
    written = []
    for rel, always in (("etc/machine-id", True), ("var/lib/dbus/machine-id", False)):
        path = os.path.join(root, rel)
        if not always and not os.path.lexists(path):
            continue
        if os.path.islink(path):  # a symlink to /etc/machine-id: already written through it
            continue
        try:
            _write(path, machine_id + "\n")
        except OSError as exc:
            raise AgentRequestError.from_os_error(exc, f"write /{rel}") from None
        written.append("/" + rel)
    return written


async def new_identity(params: dict[str, Any], set_hostname: Any, set_clock: Any) -> None:
    """Apply a new identity: entropy, clock, hostname, machine-id, and the SSH host keys
    forgotten (a new one is made when first asked for: ssh.forget_host_key); on the disk
    before it returns."""
    hostname = params.get("hostname")
    machine_id = check_machine_id(params.get("machine_id"))
    entropy = decode_entropy(params.get("entropy"))
    when = params.get("time")
    if not isinstance(when, int | float) or isinstance(when, bool):
        raise AgentRequestError("bad_request", "time must be a number")
    loc = ssh.paths()
    if loc.root == "/":  # in a VM (outside one, the kernel is the host's: only files change)
        add_entropy(entropy)  # first: everything after draws from the new pool
        set_clock(float(when))
        set_hostname(hostname)
    written = write_machine_id(machine_id, loc.root)
    ssh.forget_host_key(loc)
    folders = {os.path.dirname(os.path.join(loc.root, path.lstrip("/"))) for path in written}
    try:
        _sync_folders(sorted(folders | {loc.config_dir}))
    except OSError as exc:
        raise AgentRequestError.from_os_error(exc, "sync the new identity") from None


def _sync_folders(folders: list[str]) -> None:
    """Each folder's entries (renames, deletions) and the files renamed there made durable: on
    one filesystem the first fsync commits the journal for all of them."""
    for folder in folders:
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

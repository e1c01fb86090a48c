"""The host's secret key: 32 random bytes made on first use (file mode 0600, in the data dir's
`host/`), never sent anywhere. Each use gets a key of its own derived from it (keyed BLAKE2b over
the purpose), so a MAC of saved memory can never be mistaken for a signed cookie."""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path

from ..data.durable import fsync_path
from ..errors import HostError

KEY_BYTES = 32


class SecretKeyError(HostError):
    code = "secret_key_unusable"


def load_or_create(path: Path) -> bytes:
    """The 32-byte key in `path`, made (mode 0600, atomically: racing makers agree) if absent."""
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")  # threads too
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # never replaces a key another process made meanwhile
        except FileExistsError:
            pass
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        fsync_path(path.parent)
        key = path.read_bytes()
    if len(key) != KEY_BYTES:
        raise SecretKeyError(f"{path} is not a {KEY_BYTES}-byte key: restore it from a backup")
    return key


def derived_key(path: Path, purpose: str) -> bytes:
    """The key for one purpose (`memory-mac`, `port-cookie`), derived from the host's key."""
    master = load_or_create(path)
    return hashlib.blake2b(purpose.encode(), key=master, digest_size=KEY_BYTES).digest()

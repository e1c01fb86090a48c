"""A temporary folder every user can pass through: the fetch sandbox runs the host's package tools
as the unprivileged `sanbox-fetch` user, which cannot reach pytest's own temporary folders (root's
alone, 0700), as it could not reach a data dir closed to others."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def reachable_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)

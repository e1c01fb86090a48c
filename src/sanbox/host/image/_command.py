"""Running the build's external tools: a missing tool or a failed command becomes a typed error."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ..errors import MissingToolError
from .errors import BuildStepError

# tool -> Debian package that provides it
TOOLS = {
    "apt-get": "apt",
    "apt-cache": "apt",
    "dpkg-deb": "dpkg",
    "mmdebstrap": "mmdebstrap",
    "mkfs.ext4": "e2fsprogs",
    "depmod": "kmod",
    "chroot": "coreutils",
}


def require_tool(tool: str) -> str:
    path = shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if path is None:
        raise MissingToolError(tool, TOOLS.get(tool, tool))
    return path


def missing_tools() -> list[MissingToolError]:
    missing = []
    for tool in TOOLS:
        try:
            require_tool(tool)
        except MissingToolError as exc:
            missing.append(exc)
    return missing


def run(step: str, argv: Sequence[str], *, cwd: Path | None = None, hint: str = "") -> str:
    """Run a build command; on failure raise BuildStepError with the tail of its output."""
    exe = require_tool(argv[0])
    try:
        proc = subprocess.run(
            [exe, *argv[1:]],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        raise BuildStepError(step, f"{argv[0]}: {exc}", hint) from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-6:]
        detail = f"`{' '.join(argv[:3])} …` exited {proc.returncode}: " + " | ".join(tail)
        raise BuildStepError(step, detail, hint)
    return proc.stdout

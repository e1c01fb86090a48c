"""The API's records as frozen dataclasses, each built from its JSON by `from_json` (defined by
kind in sanbox.sdk.records), and the exec stream's events, which live with the exec codec in
`exec_protocol`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .records.computer import (
    ComputerRecord,
    Event,
    ExecResult,
    FileEntry,
    PublishedPort,
    SshAccess,
    ViewLink,
)
from .records.host import HostInfo, ImageBuild
from .records.org import ApiKey, AuditRecord, Org, OrgRegions, Quota
from .records.secret import Secret, SecretBinding
from .records.snapshot import Snapshot
from .records.template import BuildCachePruned, Pool, Template

if TYPE_CHECKING:
    from .exec_protocol import ExecEvent, Exit, Stderr, Stdout

__all__ = [
    "ApiKey",
    "AuditRecord",
    "BuildCachePruned",
    "ComputerRecord",
    "Event",
    "ExecEvent",
    "ExecResult",
    "Exit",
    "FileEntry",
    "HostInfo",
    "ImageBuild",
    "Org",
    "OrgRegions",
    "Pool",
    "PublishedPort",
    "Quota",
    "Secret",
    "SecretBinding",
    "Snapshot",
    "SshAccess",
    "Stderr",
    "Stdout",
    "Template",
    "ViewLink",
]


def __getattr__(name: str) -> Any:
    """The exec stream's events, from `exec_protocol` when first asked for: the CLI's quick
    commands (sanbox.cli.quick) read records only, and that module costs ~0.01 s to load."""
    if name in ("ExecEvent", "Exit", "Stderr", "Stdout"):
        from . import exec_protocol

        return getattr(exec_protocol, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The Sanbox SDK: `Sanbox` (sync) and `AsyncSanbox`, over the `/v1` HTTP API.

from sanbox.sdk import Sanbox
with Sanbox() as client:
    computer = client.computers.create(template="base", name="demo")
    print(computer.exec("uname -a").stdout)
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._websocket import WebSocketConnector, WebSocketLike, asgi_connector, websockets_connector
    from .client import (
        AsyncAudit,
        AsyncComputers,
        AsyncImages,
        AsyncKeys,
        AsyncOrgs,
        AsyncSanbox,
        AsyncSnapshots,
    )
    from .computer import AsyncComputer, AsyncFiles
    from .errors import (
        AuthenticationError,
        BuildFailedError,
        ComputerNotFoundError,
        ComputerNotRunningError,
        ConflictError,
        ConnectionFailedError,
        DiskTooSmallError,
        IdempotencyConflictError,
        InsufficientMemoryError,
        InsufficientResourcesError,
        InsufficientStorageError,
        InvalidNameError,
        InvalidPathError,
        InvalidRequestError,
        InvalidSpecError,
        InvalidTransitionError,
        NameTakenError,
        NotFoundError,
        PayloadTooLargeError,
        PermissionDeniedError,
        RateLimitedError,
        RequestTimeoutError,
        SanboxError,
        ServerError,
        SnapshotCorruptError,
        SnapshotNotFoundError,
        TemplateBuildingError,
        TemplateNotFoundError,
        UnavailableError,
    )
    from .exec_stream import AsyncExecStream
    from .ssh_stream import AsyncSshStream
    from .sync import (
        Audit,
        Computer,
        Computers,
        ExecStream,
        Files,
        Images,
        Keys,
        Orgs,
        Sanbox,
        Snapshots,
        SshStream,
        Templates,
    )
    from .templates import AsyncTemplates, BuildStarted
    from .types import (
        ApiKey,
        AuditRecord,
        ComputerRecord,
        Event,
        ExecEvent,
        ExecResult,
        Exit,
        FileEntry,
        HostInfo,
        ImageBuild,
        Org,
        PublishedPort,
        Snapshot,
        SshAccess,
        Stderr,
        Stdout,
        Template,
    )

_MODULES = {  # each public name -> the module that defines it, imported on first use
    "_websocket": ("WebSocketConnector", "WebSocketLike", "asgi_connector", "websockets_connector"),
    "client": (
        "AsyncAudit",
        "AsyncComputers",
        "AsyncImages",
        "AsyncKeys",
        "AsyncOrgs",
        "AsyncSanbox",
        "AsyncSnapshots",
    ),
    "computer": ("AsyncComputer", "AsyncFiles"),
    "errors": (
        "AuthenticationError",
        "BuildFailedError",
        "ComputerNotFoundError",
        "ComputerNotRunningError",
        "ConflictError",
        "ConnectionFailedError",
        "DiskTooSmallError",
        "IdempotencyConflictError",
        "InsufficientMemoryError",
        "InsufficientResourcesError",
        "InsufficientStorageError",
        "InvalidNameError",
        "InvalidPathError",
        "InvalidRequestError",
        "InvalidSpecError",
        "InvalidTransitionError",
        "NameTakenError",
        "NotFoundError",
        "PayloadTooLargeError",
        "PermissionDeniedError",
        "RateLimitedError",
        "RequestTimeoutError",
        "SanboxError",
        "ServerError",
        "SnapshotCorruptError",
        "SnapshotNotFoundError",
        "TemplateBuildingError",
        "TemplateNotFoundError",
        "UnavailableError",
    ),
    "exec_stream": ("AsyncExecStream",),
    "ssh_stream": ("AsyncSshStream",),
    "sync": (
        "Audit",
        "Computer",
        "Computers",
        "ExecStream",
        "Files",
        "Images",
        "Keys",
        "Orgs",
        "Sanbox",
        "Snapshots",
        "SshStream",
        "Templates",
    ),
    "templates": ("AsyncTemplates", "BuildStarted"),
    "types": (
        "ApiKey",
        "AuditRecord",
        "ComputerRecord",
        "Event",
        "ExecEvent",
        "ExecResult",
        "Exit",
        "FileEntry",
        "HostInfo",
        "ImageBuild",
        "Org",
        "PublishedPort",
        "Snapshot",
        "SshAccess",
        "Stderr",
        "Stdout",
        "Template",
    ),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "ApiKey",
    "AsyncAudit",
    "AsyncComputer",
    "AsyncComputers",
    "AsyncExecStream",
    "AsyncFiles",
    "AsyncImages",
    "AsyncKeys",
    "AsyncOrgs",
    "AsyncSanbox",
    "AsyncSnapshots",
    "AsyncSshStream",
    "Audit",
    "AuditRecord",
    "AuthenticationError",
    "Computer",
    "ComputerNotFoundError",
    "ComputerNotRunningError",
    "ComputerRecord",
    "Computers",
    "ConflictError",
    "ConnectionFailedError",
    "DiskTooSmallError",
    "Event",
    "ExecEvent",
    "ExecResult",
    "ExecStream",
    "Exit",
    "FileEntry",
    "PublishedPort",
    "Files",
    "HostInfo",
    "IdempotencyConflictError",
    "ImageBuild",
    "Images",
    "InsufficientMemoryError",
    "InsufficientResourcesError",
    "InsufficientStorageError",
    "InvalidNameError",
    "InvalidPathError",
    "InvalidRequestError",
    "InvalidTransitionError",
    "Keys",
    "NameTakenError",
    "NotFoundError",
    "Org",
    "Orgs",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "RequestTimeoutError",
    "Sanbox",
    "SanboxError",
    "ServerError",
    "Snapshot",
    "SnapshotCorruptError",
    "SnapshotNotFoundError",
    "Snapshots",
    "SshAccess",
    "SshStream",
    "Stderr",
    "Stdout",
    "TemplateNotFoundError",
    "UnavailableError",
    "AsyncTemplates",
    "BuildStarted",
    "BuildFailedError",
    "InvalidSpecError",
    "TemplateBuildingError",
    "Template",
    "Templates",
    "WebSocketConnector",
    "WebSocketLike",
    "asgi_connector",
    "websockets_connector",
]


def __getattr__(name: str) -> Any:
    """Each name's module is imported when the name is first used: `sanbox exec` needs the exec
    stream, not httpx (which every HTTP call needs) nor the sync facades."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

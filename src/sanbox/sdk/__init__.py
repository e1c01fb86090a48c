"""The Sanbox SDK: `Sanbox` (sync) and `AsyncSanbox`, over the `/v1` HTTP API.

from sanbox.sdk import Sanbox
with Sanbox() as client:
    computer = client.computers.create(template="base", name="demo")
    print(computer.exec("uname -a").stdout)
"""

from __future__ import annotations

from ._websocket import WebSocketConnector, WebSocketLike, asgi_connector, websockets_connector
from .client import AsyncComputers, AsyncImages, AsyncKeys, AsyncOrgs, AsyncSanbox
from .computer import AsyncComputer, AsyncFiles
from .errors import (
    AuthenticationError,
    ComputerNotFoundError,
    ComputerNotRunningError,
    ConflictError,
    ConnectionFailedError,
    DiskTooSmallError,
    IdempotencyConflictError,
    InsufficientResourcesError,
    InvalidNameError,
    InvalidPathError,
    InvalidRequestError,
    InvalidTransitionError,
    NameTakenError,
    NotFoundError,
    PermissionDeniedError,
    RequestTimeoutError,
    SanboxError,
    ServerError,
    TemplateNotFoundError,
    UnavailableError,
)
from .exec_stream import AsyncExecStream
from .sync import Computer, Computers, ExecStream, Files, Images, Keys, Orgs, Sanbox
from .types import (
    ApiKey,
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
    Stderr,
    Stdout,
)

__all__ = [
    "ApiKey",
    "AsyncComputer",
    "AsyncComputers",
    "AsyncExecStream",
    "AsyncFiles",
    "AsyncImages",
    "AsyncKeys",
    "AsyncOrgs",
    "AsyncSanbox",
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
    "InsufficientResourcesError",
    "InvalidNameError",
    "InvalidPathError",
    "InvalidRequestError",
    "InvalidTransitionError",
    "Keys",
    "NameTakenError",
    "NotFoundError",
    "Org",
    "Orgs",
    "PermissionDeniedError",
    "RequestTimeoutError",
    "Sanbox",
    "SanboxError",
    "ServerError",
    "Stderr",
    "Stdout",
    "TemplateNotFoundError",
    "UnavailableError",
    "WebSocketConnector",
    "WebSocketLike",
    "asgi_connector",
    "websockets_connector",
]

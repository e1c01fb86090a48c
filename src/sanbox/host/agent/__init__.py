"""Host-side client of the guest agent (see ``sanbox.guest.protocol`` for the wire format)."""

from .client import AgentClient
from .errors import (
    AgentError,
    AgentRouteError,
    AgentTimeoutError,
    AgentUnavailableError,
    CommandNotFoundError,
    ConnectionRefusedInGuestError,
    ExecError,
    FileNotFoundInGuestError,
    InvalidPathError,
    ProtocolError,
    RemoteError,
)
from .files import FileInfo, Files
from .kept import Attached, Kept, KeptInfo
from .process import ExecEvent, ExecProcess, ExecResult, Exit, PtySession, Stderr, Stdout
from .readings import Metrics, Ping
from .ssh import Ssh
from .tcp import TcpStream
from .watch import DirWatch, FsEvent, Watches

__all__ = [
    "AgentClient",
    "AgentError",
    "AgentRouteError",
    "AgentTimeoutError",
    "AgentUnavailableError",
    "Attached",
    "CommandNotFoundError",
    "DirWatch",
    "ConnectionRefusedInGuestError",
    "ExecError",
    "ExecEvent",
    "ExecProcess",
    "ExecResult",
    "Exit",
    "FileInfo",
    "FileNotFoundInGuestError",
    "FsEvent",
    "Files",
    "InvalidPathError",
    "Kept",
    "KeptInfo",
    "Metrics",
    "Ping",
    "ProtocolError",
    "PtySession",
    "RemoteError",
    "Ssh",
    "Stderr",
    "Stdout",
    "TcpStream",
    "Watches",
]

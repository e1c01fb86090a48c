"""The exec WebSocket's messages on the client side, as plain dataclasses.

The server's models are pydantic (sanbox.api.exec_protocol); the SDK does not import pydantic:
every `sanbox` command imports the SDK, and pydantic with a few models costs about 0.12 s. These
mirror the server's messages instead (`type` is the class's `TYPE`), and
tests/unit/test_sdk_openapi.py checks them against docs/openapi.json field for field.
Server messages decode to `Stdout`, `Stderr`, `Exit` (the SDK's exec events, also exported by
sanbox.sdk.types) and `ExecError`; `sanbox exec` loads this module, not the other records.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class Stdout:
    data: bytes


@dataclass(frozen=True)
class Stderr:
    data: bytes


@dataclass(frozen=True)
class Exit:
    exit_code: int
    signal: int | None = None  # the number of the signal that ended it (exit_code is 128 + it)
    timed_out: bool = False


ExecEvent = Stdout | Stderr | Exit

# The guest is Linux: names map to Linux's numbers whatever the client's platform says.
SIGNALS = {
    "HUP": 1,
    "INT": 2,
    "QUIT": 3,
    "ILL": 4,
    "TRAP": 5,
    "ABRT": 6,
    "BUS": 7,
    "FPE": 8,
    "KILL": 9,
    "USR1": 10,
    "SEGV": 11,
    "USR2": 12,
    "PIPE": 13,
    "ALRM": 14,
    "TERM": 15,
    "STKFLT": 16,
    "CHLD": 17,
    "CONT": 18,
    "STOP": 19,
    "TSTP": 20,
    "TTIN": 21,
    "TTOU": 22,
    "URG": 23,
    "XCPU": 24,
    "XFSZ": 25,
    "VTALRM": 26,
    "PROF": 27,
    "WINCH": 28,
    "IO": 29,
    "PWR": 30,
    "SYS": 31,
}


def signal_number(sig: int | str) -> int:
    """A signal as the wire carries it: 2, "2", "SIGINT", "INT" and "int" are all 2."""
    if isinstance(sig, int) or sig.strip().isdigit():
        number = int(sig)
    else:
        name = sig.strip().upper()
        number = SIGNALS.get(name.removeprefix("SIG"), 0)
        if not number:
            raise ValueError(f"unknown signal {sig!r}")
    if not 1 <= number <= 64:
        raise ValueError(f"signal numbers are 1-64, got {number}")
    return number


class ClientMessage:
    TYPE: ClassVar[str]

    def encode(self) -> str:
        return json.dumps({"type": self.TYPE, **asdict(self)})  # type: ignore[call-overload]


@dataclass(frozen=True)
class ExecStart(ClientMessage):
    """The first message: what to run (`cmd` None with `pty`: a login shell)."""

    TYPE: ClassVar[str] = "start"
    cmd: str | list[str] | None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    user: str | None = None
    timeout: float | None = None
    pty: bool = False
    rows: int = 24
    cols: int = 80


@dataclass(frozen=True)
class ExecStdin(ClientMessage):
    TYPE: ClassVar[str] = "stdin"
    data: bytes

    def encode(self) -> str:
        return json.dumps({"type": self.TYPE, "data": base64.b64encode(self.data).decode()})


@dataclass(frozen=True)
class ExecEof(ClientMessage):
    TYPE: ClassVar[str] = "eof"


@dataclass(frozen=True)
class ExecSignal(ClientMessage):
    TYPE: ClassVar[str] = "signal"
    signal: int


@dataclass(frozen=True)
class ExecResize(ClientMessage):
    TYPE: ClassVar[str] = "resize"
    rows: int
    cols: int


@dataclass(frozen=True)
class ExecError:
    """The server's last message when the session failed."""

    code: str
    message: str


def decode(text: str) -> ExecEvent | ExecError | None:
    """A server message; None for a type this SDK does not know (a newer server's)."""
    message: dict[str, Any] = json.loads(text)
    kind = message.get("type")
    if kind == "stdout":
        return Stdout(base64.b64decode(message["data"]))
    if kind == "stderr":
        return Stderr(base64.b64decode(message["data"]))
    if kind == "exit":
        signal = message.get("signal")
        return Exit(
            exit_code=int(message["exit_code"]),
            signal=None if signal is None else int(signal),
            timed_out=bool(message.get("timed_out", False)),
        )
    if kind == "error":
        return ExecError(str(message.get("code")), str(message.get("message", "")))
    return None

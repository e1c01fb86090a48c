"""The exec WebSocket's messages (/v1/computers/{ref}/exec/stream), one JSON text message each.

The client sends one `start`, then any number of `stdin`, `eof`, `signal` and `resize`; the server
sends `stdout`/`stderr` chunks and ends with one `exit`, or with one `error` before it closes.
Bytes travel base64-encoded; a signal is its number (the SDK and the CLI turn names into numbers).
docs/openapi.json describes them as the components `ExecClientMessage` and `ExecServerMessage`
(FastAPI leaves WebSocket routes out of the schema); the SDK's plain-dataclass codec is checked
against that document field for field (tests/unit/test_sdk_openapi.py).
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from fastapi import FastAPI
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..control.names import check_env

_B64 = "base64 of the bytes"


class ExecStart(BaseModel):
    """The first message: what to run. `pty` runs it on a terminal (`cmd` null: a login shell)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["start"] = "start"
    cmd: str | list[str] | None = Field(
        None, description="argv, or a string run by the shell; null only with pty"
    )
    env: Annotated[dict[str, str], AfterValidator(check_env)] = Field(default_factory=dict)
    cwd: str | None = None
    user: str | None = None
    timeout: float | None = Field(None, gt=0, le=24 * 3600, description="seconds; not with pty")
    pty: bool = False
    rows: int = Field(24, ge=1, le=65535)
    cols: int = Field(80, ge=1, le=65535)


class ExecStdin(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["stdin"]
    data: str = Field(description=_B64)

    def raw(self) -> bytes:
        return base64.b64decode(self.data, validate=True)


class ExecEof(BaseModel):
    """No more stdin (the command sees end of file; a PTY ignores it)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["eof"]


class ExecSignal(BaseModel):
    """Send a signal to the command's process group."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["signal"]
    signal: int = Field(ge=1, le=64, description="the signal's number, e.g. 2 for SIGINT")


class ExecResize(BaseModel):
    """The terminal's new size (PTY sessions)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["resize"]
    rows: int = Field(ge=1, le=65535)
    cols: int = Field(ge=1, le=65535)


class _ServerMessage(BaseModel):
    # the server always sends every field: the document says so (`type` included)
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class ExecStdout(_ServerMessage):
    type: Literal["stdout"] = "stdout"
    data: str = Field(description=_B64)


class ExecStderr(_ServerMessage):
    type: Literal["stderr"] = "stderr"
    data: str = Field(description=_B64)


class ExecExit(_ServerMessage):
    """The last message of a command that ran: how it ended."""

    type: Literal["exit"] = "exit"
    exit_code: int = Field(description="128 + the signal's number when a signal ended it")
    signal: int | None = Field(description="the number of the signal that ended it")
    timed_out: bool = Field(description="its `timeout` ended it (exit code 124)")


class ExecError(_ServerMessage):
    """The session failed (the server closes the WebSocket after it); `code` as in HTTP errors."""

    type: Literal["error"] = "error"
    code: str
    message: str


ExecInput = Annotated[ExecStdin | ExecEof | ExecSignal | ExecResize, Field(discriminator="type")]
ExecClientMessage = Annotated[ExecStart | ExecInput, Field(discriminator="type")]
ExecServerMessage = Annotated[
    ExecStdout | ExecStderr | ExecExit | ExecError, Field(discriminator="type")
]
START = TypeAdapter(ExecStart)
INPUT: TypeAdapter[ExecStdin | ExecEof | ExecSignal | ExecResize] = TypeAdapter(ExecInput)
SERVER: TypeAdapter[ExecStdout | ExecStderr | ExecExit | ExecError] = TypeAdapter(ExecServerMessage)


def stdout(data: bytes) -> str:
    return ExecStdout(data=base64.b64encode(data).decode()).model_dump_json()


def stderr(data: bytes) -> str:
    return ExecStderr(data=base64.b64encode(data).decode()).model_dump_json()


def exit_(exit_code: int, signal: int | None = None, timed_out: bool = False) -> str:
    return ExecExit(exit_code=exit_code, signal=signal, timed_out=timed_out).model_dump_json()


def explain(exc: ValueError) -> str:
    """A message's faults on one line (pydantic's own text spans lines and links its docs)."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    return "; ".join(
        f"{'.'.join(str(part) for part in e['loc']) or 'message'}: {e['msg']}" for e in exc.errors()
    )


def openapi_components() -> dict[str, Any]:
    """The messages as named OpenAPI components: each model, and the two discriminated unions
    `ExecClientMessage` and `ExecServerMessage`."""
    ref = "#/components/schemas/{model}"
    schemas: dict[str, Any] = {}
    for name, adapter, mode in (
        ("ExecClientMessage", TypeAdapter(ExecClientMessage), "validation"),
        ("ExecServerMessage", SERVER, "serialization"),
    ):
        schema = adapter.json_schema(ref_template=ref, mode=mode)  # type: ignore[arg-type]
        schemas.update(schema.pop("$defs", {}))
        schemas[name] = schema
    return schemas


def document(app: FastAPI) -> None:
    """Put the messages into `app.openapi()` (and so into /openapi.json and docs/openapi.json)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(openapi_components())
        return app.openapi_schema or build()

    app.openapi = openapi  # type: ignore[method-assign]

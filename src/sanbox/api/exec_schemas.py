"""The run-to-completion exec's request and answer (`POST /v1/computers/{ref}/exec`); the exec
WebSocket's messages are `exec_protocol.py`.

A command's input comes as text (`stdin`) or as bytes (`stdin_base64`): JSON has no bytes, and
text cannot carry input that is not UTF-8 (a gzip, an image, a tar for `tar -x`). The bytes
travel base64-encoded as the WebSocket's `stdin` messages carry them. Both forms are bounded by
the request body's limit (`limits.BodyLimit`, before the route reads the body), and base64
decodes to fewer bytes than it takes, so neither carries more input than the body it came in.
"""

from __future__ import annotations

import base64

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from ..control.errors import InvalidRequestError
from .schemas import Env

_STDIN = (
    "Text fed to the command's standard input (as UTF-8), then end of file. Not with "
    "`stdin_base64`."
)
_STDIN_BASE64 = (
    "The command's standard input as bytes, base64-encoded (standard alphabet, padded, no line "
    "breaks), as the exec WebSocket's `stdin` messages carry them: for input that is not UTF-8 "
    "text (a gzip, an image, a tar). Not with `stdin`. Like `stdin`, bounded by the request "
    "body's limit (1 MiB unless the server's SANBOX_MAX_BODY_BYTES says otherwise), so about "
    "three quarters of it in input bytes."
)


class ExecRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cmd: list[str] | str
    env: Env = Field(default_factory=dict)
    cwd: str | None = None
    user: str | None = None
    stdin: str | None = Field(None, description=_STDIN)
    stdin_base64: str | None = Field(None, description=_STDIN_BASE64)
    timeout: float | None = Field(None, gt=0, le=24 * 3600)
    max_output_bytes: int | None = Field(
        None,
        ge=0,
        description="Output kept per stream (stdout, stderr); at most, and by default, the "
        "server's limit (10 MiB unless configured). The first bytes are kept; the command's "
        "further output is read and dropped, and `stdout_truncated`/`stderr_truncated` say so.",
    )
    # the input as bytes, made once while the request is checked
    _input: bytes | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _one_input(self) -> ExecRequest:
        """Refused before anything runs (422 `validation_error`): both forms at once (which would
        the command read?), base64 that does not decode, text that is not Unicode (a lone
        surrogate escape such as `\\ud800` has no UTF-8)."""
        if self.stdin is not None and self.stdin_base64 is not None:
            raise InvalidRequestError(
                "give the command's input as stdin (text) or as stdin_base64 (bytes), not both"
            )
        if self.stdin_base64 is not None:
            try:
                self._input = base64.b64decode(self.stdin_base64, validate=True)
            except ValueError:  # binascii.Error, or a character outside ASCII
                raise InvalidRequestError(
                    "stdin_base64 is not base64 (the standard alphabet A-Z a-z 0-9 + /, padded "
                    "with '=', no line breaks)"
                ) from None
        elif self.stdin is not None:
            try:
                self._input = self.stdin.encode()
            except UnicodeEncodeError:
                raise InvalidRequestError(
                    "stdin is not Unicode text (a lone surrogate): send bytes as stdin_base64"
                ) from None
        return self

    def input(self) -> bytes | None:
        """The command's standard input; None: it reads end of file at once."""
        return self._input


class ExecResponse(BaseModel):
    exit_code: int
    stdout: str
    stderr: str
    signal: int | None = None
    timed_out: bool = False
    stdout_truncated: bool = Field(default=False, description="stdout is only its first bytes")
    stderr_truncated: bool = Field(default=False, description="stderr is only its first bytes")

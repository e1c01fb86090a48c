"""Errors raised inside the agent.

Hierarchy::

    AgentRequestError          a request failed; sent to the host as MSG {"type": "error"}
    protocol.ProtocolError     malformed bytes on the wire (decoder resyncs)
      protocol.PayloadError    a well-framed frame with a bad payload
"""

from __future__ import annotations

import errno

_ERRNO_CODES = {
    errno.ENOENT: "not_found",
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.EEXIST: "already_exists",
    errno.ENOTDIR: "not_a_directory",
    errno.EISDIR: "is_a_directory",
    errno.ENOTEMPTY: "not_empty",
    errno.ENOSPC: "no_space",
    errno.EROFS: "read_only",
}


class AgentRequestError(Exception):
    """A request failed with a stable ``code`` and a human ``message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_os_error(cls, exc: OSError, what: str = "") -> AgentRequestError:
        code = _ERRNO_CODES.get(exc.errno or 0, "io_error")
        detail = exc.strerror or str(exc)
        target = what or (str(exc.filename) if exc.filename is not None else "")
        return cls(code, f"{target}: {detail}" if target else detail)

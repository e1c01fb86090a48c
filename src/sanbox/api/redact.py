"""Keys and tokens never reach a log line: a logging filter for uvicorn's access and error logs
(which print request paths, query strings included) that blanks `token=` (and a view link's
`sanbox_view_token=`) values and anything that looks like a Sanbox API key.

A query parameter is judged as the server would read it: its name and value percent-decoded
(`%74oken=`, `tok%65n=`, `token%3D...`, `TOKEN=`), separated by `&` or `;`. Text decoded up to
`DECODE_ROUNDS` times, so a doubly encoded key is caught as well."""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

from .ports.access import VIEW_TOKEN_PARAM

_PARAM = re.compile(r"(^|[?&;\s])([^?&;\s\"'#]+)")  # a separator, then one name=value
_ENCODED = re.compile(r"[A-Za-z0-9_.~+%-]*%[0-9A-Fa-f]{2}[A-Za-z0-9_.~+%-]*")
_KEY = re.compile(r"sbk_[A-Za-z0-9_-]+")
TOKEN_NAMES = frozenset({"token", "access_token", VIEW_TOKEN_PARAM})  # a view link's too
REDACTED = "[redacted]"
DECODE_ROUNDS = 3
LOGGERS = ("uvicorn.access", "uvicorn.error", "uvicorn")


def _decoded(text: str) -> str:
    for _ in range(DECODE_ROUNDS):
        decoded = unquote_plus(text)
        if decoded == text:
            break
        text = decoded
    return text


def _param(match: re.Match[str]) -> str:
    separator, pair = match[1], match[2]
    name, eq, _ = _decoded(pair).partition("=")
    if eq and name.strip().lower() in TOKEN_NAMES:
        raw_name = pair.partition("=")[0] if "=" in pair else name
        return f"{separator}{raw_name}={REDACTED}"
    return match[0]


def _encoded_key(match: re.Match[str]) -> str:
    return "sbk_" + REDACTED if "sbk_" in _decoded(match[0]) else match[0]


def redact(text: str) -> str:
    text = _PARAM.sub(_param, text)
    return _KEY.sub("sbk_" + REDACTED, _ENCODED.sub(_encoded_key, text))


class RedactCredentials(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in args)
        elif isinstance(args, dict):
            record.args = {k: redact(v) if isinstance(v, str) else v for k, v in args.items()}
        return True


def install() -> None:
    """Add the filter to uvicorn's loggers (once)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactCredentials) for f in logger.filters):
            logger.addFilter(RedactCredentials())

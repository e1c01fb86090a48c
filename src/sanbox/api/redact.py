"""Keys and tokens never reach a log line: a logging filter for uvicorn's access and error logs
(which print request paths, query strings included) that blanks `token=` values and anything that
looks like a Sanbox API key."""

from __future__ import annotations

import logging
import re

_TOKEN_PARAM = re.compile(r"(?i)([?&](?:token|access_token)=)[^&\s\"']*")
_KEY = re.compile(r"sbk_[A-Za-z0-9_-]+")
REDACTED = "[redacted]"
LOGGERS = ("uvicorn.access", "uvicorn.error", "uvicorn")


def redact(text: str) -> str:
    return _KEY.sub("sbk_" + REDACTED, _TOKEN_PARAM.sub(r"\1" + REDACTED, text))


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

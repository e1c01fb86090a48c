"""A secret's value as `sanbox secret set --value-stdin` reads it, and an API key as `sanbox config
set --api-key-stdin` does: from standard input (never an argument, so it stays out of shell history
and `ps`), typed without echo on a terminal. Both ways of running each command read it here
(sanbox.cli.secret, sanbox.cli.quick_org; sanbox.cli.config, sanbox.cli.quick)."""

from __future__ import annotations

import io
import sys
from typing import BinaryIO

from ._output import fail

MAX_VALUE = 8 * 1024
"""Bytes of a value the API takes; standard input is read no further than this (and a newline)."""
NOT_ON_STDIN = (
    "give the value on standard input with --value-stdin "
    "(never as an argument: it would stay in shell history and ps)"
)


KEY_ONCE = "give the API key once: --api-key-stdin (kept out of shell history and ps) or --api-key"


def read_value(stream: BinaryIO, code: str = "invalid_secret") -> str:
    """All of `stream` (at most `MAX_VALUE` bytes and a newline), less ONE trailing newline.
    Errors (`code`) say what is wrong with the value, never what it is."""
    data = stream.read(MAX_VALUE + 3)
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    if len(data) > MAX_VALUE:
        fail(code, f"the value is over {MAX_VALUE} bytes")
    if not data:
        fail(code, "the value is empty: pipe it in, e.g. `< key.txt`")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        fail(code, "the value is not UTF-8 text")


def stdin_value(code: str = "invalid_secret") -> str:
    if sys.stdin.isatty():  # typed in, then: not echoed
        import getpass

        typed = getpass.getpass("value (not shown): ")
        return read_value(io.BytesIO(typed.encode("utf-8", "surrogatepass")), code)
    stream = getattr(sys.stdin, "buffer", None)  # a text stream may have no bytes under it
    if stream is None:
        stream = io.BytesIO(sys.stdin.read(MAX_VALUE + 3).encode("utf-8", "surrogatepass"))
    return read_value(stream, code)


def api_key(given: str | None, from_stdin: bool) -> str | None:
    """`sanbox config set`'s key: `--api-key KEY`, or standard input with `--api-key-stdin`
    (the way that keeps it out of shell history and `ps`); None if neither is given."""
    if given is not None and from_stdin:
        fail("invalid_argument", KEY_ONCE)
    if not from_stdin:
        return given
    key = stdin_value("invalid_api_key")
    if any(c.isspace() for c in key):  # a key is one word: two lines piped in are a mistake
        fail("invalid_api_key", "the key read from standard input holds a space or a newline")
    return key

"""A secret's value as `sanbox secret set --value-stdin` reads it: from standard input only (never
an argument, so it stays out of shell history and `ps`), typed without echo on a terminal. Both
ways of running the command read it here (sanbox.cli.secret, sanbox.cli.quick_org)."""

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


def read_value(stream: BinaryIO) -> str:
    """All of `stream` (at most `MAX_VALUE` bytes and a newline), less ONE trailing newline.
    Errors say what is wrong with the value, never what it is."""
    data = stream.read(MAX_VALUE + 3)
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    if len(data) > MAX_VALUE:
        fail("invalid_secret", f"the value is over {MAX_VALUE} bytes")
    if not data:
        fail("invalid_secret", "the value is empty: pipe it in, e.g. `< key.txt`")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        fail("invalid_secret", "the value is not UTF-8 text")


def stdin_value() -> str:
    if sys.stdin.isatty():  # typed in, then: not echoed
        import getpass

        typed = getpass.getpass("value (not shown): ")
        return read_value(io.BytesIO(typed.encode("utf-8", "surrogatepass")))
    stream = getattr(sys.stdin, "buffer", None)  # a text stream may have no bytes under it
    if stream is None:
        stream = io.BytesIO(sys.stdin.read(MAX_VALUE + 3).encode("utf-8", "surrogatepass"))
    return read_value(stream)

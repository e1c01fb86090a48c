"""Options and argument parsing shared by the CLI's commands."""

from __future__ import annotations

from typing import Annotated

import typer

from ._output import fail

EnvOption = Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable.")]
LabelOption = Annotated[
    list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE, repeatable.")
]
MoveKeyOption = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key",
        help="Any text of yours (up to 200 characters): the same command run again with it "
        "answers where its move left the item instead of moving it once more.",
    ),
]


def pairs(values: list[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values or []:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            fail("invalid_argument", f"{what} must be KEY=VALUE, got {value!r}")
        out[key] = rest
    return out

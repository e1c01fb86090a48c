"""The computer types: built-in templates whose specs ship in the repository's `templates/`
(`templates/<type>/sanbox.toml` and the files it copies), readable and buildable like any spec.
An org builds a type once (`sanbox template build --type docker`, or the first
`sanbox create --type docker`); a create of it restores its ready snapshot like any template's.
`SANBOX_TYPES_DIR` points elsewhere (an installation without the repository)."""

from __future__ import annotations

import os
from pathlib import Path

TYPES = ("docker", "opencode", "browser", "assistant")


class UnknownTypeError(ValueError):
    pass


def types_dir() -> Path:
    configured = os.environ.get("SANBOX_TYPES_DIR")
    return Path(configured) if configured else Path(__file__).parents[3] / "templates"


def type_dir(name: str) -> Path:
    """The folder of type `name`'s spec; UnknownTypeError says which types there are."""
    folder = types_dir() / name
    if name not in TYPES or not (folder / "sanbox.toml").is_file():
        have = [t for t in TYPES if (types_dir() / t / "sanbox.toml").is_file()]
        where = f" in {types_dir()}" if not have else ""
        raise UnknownTypeError(
            f"no computer type {name!r}{where}: the types are {', '.join(have or TYPES)}"
            + ("" if have else " (set SANBOX_TYPES_DIR to the repository's templates/)")
        )
    return folder

"""Computer names: DNS labels, unique per org; generated when not given."""

from __future__ import annotations

import re
import secrets

from .errors import InvalidRequestError

_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_ADJECTIVES = ("amber", "brisk", "calm", "deft", "eager", "fond", "grand", "keen", "lucid", "merry")
_NOUNS = ("otter", "heron", "maple", "comet", "delta", "ember", "fjord", "grove", "lynx", "quill")


def check_name(name: str) -> str:
    if not _LABEL.match(name) or name.startswith("cmp_"):
        raise InvalidRequestError(
            f"invalid name {name!r}: use 1-63 lowercase letters, digits and hyphens, "
            "starting and ending with a letter or digit",
            "invalid_name",
        )
    return name


def generate_name() -> str:
    return f"{secrets.choice(_ADJECTIVES)}-{secrets.choice(_NOUNS)}-{secrets.token_hex(2)}"

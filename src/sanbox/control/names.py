"""Every identifier the API accepts, checked in one place, each as a whole string: names of
computers, orgs, templates, snapshots and secrets are DNS labels (1-63 lowercase letters, digits
and hyphens, starting and ending with a letter or digit), so they can stand in a published URL's
host name; key names are short printable text; labels are a key (a DNS label, dots and slashes
allowed inside, up to 63) and a printable value (up to 255). Nothing with a control character, a
trailing newline or an unbounded length gets through. Environment variables have POSIX
names and values without NUL. Computer names are generated when not given.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping

from ..guest.ssh import public_key_problem
from .errors import InvalidRequestError

NAME_MAX = 63
TEXT_MAX = 128
LABEL_KEY_MAX = 63
LABEL_VALUE_MAX = 255
LABELS_MAX = 64
METADATA_MAX = 64  # E2B's metadata: pairs, a key's and a value's characters, all pairs' bytes
METADATA_KEY_MAX = 256
METADATA_VALUE_MAX = 1024
METADATA_BYTES_MAX = 16 * 1024
ENV_MAX = 256
ENV_VALUE_MAX = 128 * 1024

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_LABEL_KEY = re.compile(r"[a-z0-9](?:[a-z0-9._/-]{0,61}[a-z0-9])?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ADJECTIVES = ("amber", "brisk", "calm", "deft", "eager", "fond", "grand", "keen", "lucid", "merry")
_NOUNS = ("otter", "heron", "maple", "comet", "delta", "ember", "fjord", "grove", "lynx", "quill")


def check_name(name: object, what: str = "name") -> str:
    """A DNS label: the names of computers, orgs, templates, snapshots and secrets."""
    if not isinstance(name, str) or _LABEL.fullmatch(name) is None:
        shown = repr(name)[:80]
        raise InvalidRequestError(
            f"invalid {what} {shown}: use 1-{NAME_MAX} lowercase letters, digits and hyphens, "
            "starting and ending with a letter or digit",
            "invalid_name",
        )
    return name


def check_text(value: object, what: str, max_len: int = TEXT_MAX) -> str:
    """Free text shown to people (a key's name): printable, one line, bounded."""
    if not isinstance(value, str) or len(value) > max_len or _CONTROL.search(value):
        raise InvalidRequestError(
            f"invalid {what} {repr(value)[:80]}: use at most {max_len} printable characters "
            "on one line",
            "invalid_name",
        )
    return value


def check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Labels: at most 64; keys like `team` or `app.example/tier`; printable values."""
    if len(labels) > LABELS_MAX:
        raise InvalidRequestError(f"at most {LABELS_MAX} labels", "invalid_label")
    for key, value in labels.items():
        if not isinstance(key, str) or _LABEL_KEY.fullmatch(key) is None:
            raise InvalidRequestError(
                f"invalid label key {repr(key)[:80]}: use 1-{LABEL_KEY_MAX} lowercase letters, "
                "digits, '.', '_', '/' and '-', starting and ending with a letter or digit",
                "invalid_label",
            )
        if (
            not isinstance(value, str)
            or len(value) > LABEL_VALUE_MAX
            or _CONTROL.search(value) is not None
        ):
            raise InvalidRequestError(
                f"invalid value of label {key!r}: use at most {LABEL_VALUE_MAX} printable "
                "characters on one line",
                "invalid_label",
            )
    return dict(labels)


def check_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """E2B's metadata: any keys, as E2B's SDK gives them (`userId`, `a b.c`), each 1-256
    characters, values up to 1024, at most 64 pairs and 16 KiB together; no NUL (PostgreSQL's
    JSON cannot hold it)."""
    if len(metadata) > METADATA_MAX:
        raise InvalidRequestError(f"at most {METADATA_MAX} metadata keys", "invalid_metadata")
    size = 0
    for key, value in metadata.items():
        if not isinstance(key, str) or not 1 <= len(key) <= METADATA_KEY_MAX or "\0" in key:
            raise InvalidRequestError(
                f"invalid metadata key {repr(key)[:80]}: use 1-{METADATA_KEY_MAX} characters, "
                "no NUL",
                "invalid_metadata",
            )
        if not isinstance(value, str) or len(value) > METADATA_VALUE_MAX or "\0" in value:
            raise InvalidRequestError(
                f"invalid value of metadata key {key[:80]!r}: use at most {METADATA_VALUE_MAX} "
                "characters, no NUL",
                "invalid_metadata",
            )
        size += len(key.encode()) + len(value.encode())
    if size > METADATA_BYTES_MAX:
        raise InvalidRequestError(
            f"metadata are {size} bytes: at most {METADATA_BYTES_MAX}", "invalid_metadata"
        )
    return dict(metadata)


def is_label(key: str, value: str) -> bool:
    """Whether a pair would pass `check_labels`."""
    return (
        _LABEL_KEY.fullmatch(key) is not None
        and len(value) <= LABEL_VALUE_MAX
        and _CONTROL.search(value) is None
    )


def is_env_name(name: object) -> bool:
    """A POSIX environment variable name: letters, digits and '_', not starting with a digit."""
    return isinstance(name, str) and _ENV_NAME.fullmatch(name) is not None


def check_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment variables: POSIX names; values without NUL (newlines are allowed)."""
    if len(env) > ENV_MAX:
        raise InvalidRequestError(f"at most {ENV_MAX} environment variables", "invalid_env")
    for key, value in env.items():
        if not is_env_name(key):
            raise InvalidRequestError(
                f"invalid environment variable name {repr(key)[:80]}: use letters, digits and "
                "'_', not starting with a digit, at most 255",
                "invalid_env",
            )
        if not isinstance(value, str) or "\0" in value or len(value) > ENV_VALUE_MAX:
            raise InvalidRequestError(
                f"invalid value of {key}: no NUL, at most {ENV_VALUE_MAX} characters",
                "invalid_env",
            )
    return dict(env)


def check_port(port: object) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidRequestError(f"invalid port {repr(port)[:20]}: use 1-65535", "invalid_port")
    return port


def check_public_key(key: object) -> str:
    """An OpenSSH public key line `TYPE BASE64 [COMMENT]`: one line, no options (the guest checks
    it again before it writes authorized_keys)."""
    problem = public_key_problem(key)
    if problem is not None:
        raise InvalidRequestError(f"invalid public key: {problem}", "invalid_public_key")
    assert isinstance(key, str)
    return key


def generate_name() -> str:
    return f"{secrets.choice(_ADJECTIVES)}-{secrets.choice(_NOUNS)}-{secrets.token_hex(2)}"

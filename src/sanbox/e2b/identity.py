"""How a Sanbox computer looks to E2B's SDK: its sandbox id, its envd access token, its traffic
token, the envd version it reports, the labels that carry E2B's own settings, and its metadata
(kept apart from its labels; the pairs that are valid labels are labels too).

A sandbox id is the computer's id with a dash for the underscore (`cmp_ab12` -> `cmp-ab12`): it
must be a DNS label, since the SDK puts it in `{port}-{sandboxID}.{domain}`. The tokens are MACs
of the computer's id under keys of the server's (`host.secret.derived_key`), so nothing is stored
and a token opens one computer only."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from pathlib import Path

from ..control.names import is_label
from ..host.keys.secret import derived_key
from ..store.models import ComputerRow

ENVD_VERSION = "0.5.7"  # turns on the default user, stdin, close_stdin, octet-stream uploads
ENVD_PORT = 49983
CLIENT_ID = "sanbox"
LABEL_PREFIX = "e2b/"  # labels of E2B's settings, kept out of the metadata the SDK sees
AUTO_PAUSE = "e2b/auto-pause"  # "true": a timed-out sandbox is paused with its memory
PUBLIC_TRAFFIC = "e2b/public-traffic"  # "true": its ports are open to whoever has the URL

_SANDBOX_ID = re.compile(r"cmp-[a-z0-9]{12}")


def sandbox_id(computer_id: str) -> str:
    return computer_id.replace("_", "-", 1)


def computer_id(sandbox: str) -> str | None:
    """The computer id a sandbox id names, or None when it is not one."""
    if _SANDBOX_ID.fullmatch(sandbox) is None:
        return None
    return "cmp_" + sandbox[4:]


def is_sandbox_id(label: str) -> bool:
    return _SANDBOX_ID.fullmatch(label) is not None


def metadata(row: ComputerRow) -> dict[str, str]:
    """The metadata E2B's SDK gave the computer; for one made before they were kept apart (or
    made through /v1), its labels but E2B's own settings."""
    if row.e2b_metadata is not None:
        return {str(k): str(v) for k, v in row.e2b_metadata.items()}
    return {k: v for k, v in row.labels.items() if not k.startswith(LABEL_PREFIX)}


def mirrored_labels(metadata: dict[str, str], room: int) -> dict[str, str]:
    """The metadata pairs that are also valid labels (and not under `e2b/`), at most `room` of
    them in the order given: what /v1 sees and filters by of a sandbox's metadata."""
    labels: dict[str, str] = {}
    for key, value in metadata.items():
        if len(labels) < room and not key.startswith(LABEL_PREFIX) and is_label(key, value):
            labels[key] = value
    return labels


class Tokens:
    """The envd access token and the traffic token of each computer."""

    def __init__(self, secret_key: Path) -> None:
        self._envd = derived_key(secret_key, "e2b-envd-token")
        self._traffic = derived_key(secret_key, "e2b-traffic-token")

    @staticmethod
    def _mac(key: bytes, computer: str) -> str:
        return hmac.new(key, computer.encode(), hashlib.sha256).hexdigest()[:48]

    def envd(self, computer: str) -> str:
        return self._mac(self._envd, computer)

    def traffic(self, computer: str) -> str:
        return self._mac(self._traffic, computer)

    def envd_matches(self, computer: str, token: str) -> bool:
        return hmac.compare_digest(self.envd(computer), token)

    def traffic_matches(self, computer: str, token: str) -> bool:
        return hmac.compare_digest(self.traffic(computer), token)


def file_signature(token: str, path: str, operation: str, user: str, expires: int | None) -> str:
    """E2B's v1 signature of a file URL (`sandbox/signature.py`): whoever has the sandbox's
    access token may hand out a URL that reads (or writes) one path as one user."""
    raw = f"{path}:{operation}:{user}:{token}" + (f":{expires}" if expires is not None else "")
    digest = hashlib.sha256(raw.encode()).digest()
    return "v1_" + base64.b64encode(digest).rstrip(b"=").decode()


def signature_valid(
    token: str, path: str, operation: str, user: str, signature: str, expires: str | None
) -> bool:
    try:
        until = int(expires) if expires else None
    except ValueError:
        return False
    if until is not None and until < time.time():
        return False
    expected = file_signature(token, path, operation, user, until)
    return hmac.compare_digest(expected, signature)

"""Values sealed at rest: AES-256-GCM under the server's sealing key, a file kept outside the
database (made on first use, mode 0600; `SANBOX_SECRETS_KEY_FILE`), so a dump of the database
alone reveals nothing. Each sealed value is bound to what it belongs to (`context`, the additional
data: `secret/<org>/<id>`, `ca/<org>`): a blob copied to another record does not open."""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import HostError
from .secret import load_or_create

VERSION = b"s1"
NONCE_BYTES = 12


class SealError(HostError):
    code = "sealed_value_unreadable"


class Sealer:
    def __init__(self, key_file: Path) -> None:
        self.key_file = key_file
        self._aead = AESGCM(load_or_create(key_file))

    def seal(self, plaintext: bytes, context: str) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return VERSION + nonce + self._aead.encrypt(nonce, plaintext, context.encode())

    def open(self, blob: bytes, context: str) -> bytes:
        if blob[: len(VERSION)] != VERSION:
            raise SealError(f"a sealed value of {context} has an unknown format")
        nonce = blob[len(VERSION) : len(VERSION) + NONCE_BYTES]
        try:
            return self._aead.decrypt(nonce, blob[len(VERSION) + NONCE_BYTES :], context.encode())
        except InvalidTag:
            raise SealError(
                f"a sealed value of {context} does not open with {self.key_file}: the key file "
                "was replaced or the record altered (restore the key file from a backup)"
            ) from None

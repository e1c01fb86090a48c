"""What the secret proxy asks of the control side (`Interception`, implemented by
`control/secret_book.py`, so egress never imports control), what a fleet host is handed to run
it there (`Handover`), and the error a refused connection raises for the proxy to report."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .injection import Injection


class RefusedError(Exception):
    """This connection may not go where it asks (`status` for an HTTP answer)."""

    def __init__(self, name: str, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.name, self.reason, self.status = name, reason, status

    def answer(self) -> str:
        if self.status == 403:
            return f"{self.name} is blocked ({self.reason})"
        return f"{self.name}: {self.reason}" if self.name != "?" else self.reason


@dataclass(frozen=True)
class Handover:
    """What a host that runs a computer's proxy needs of its bound secrets when the control plane
    is elsewhere (a fleet host): the injections with their values, the org's CA to mint leaves
    with, and whether foreign placeholders are refused. Held in memory only; never in a repr."""

    org_id: str
    injections: tuple[Injection, ...]
    ca_pem: bytes
    ca_key_pem: bytes = field(repr=False)
    strict_placeholders: bool = False


class Interception(Protocol):
    """The secrets bound to one computer, as the secret proxy sees them (the control side)."""

    def applies(self, name: str) -> bool:
        """Whether a secret bound now applies to `name` (intercept it, else pass it through)."""
        ...

    async def server_context(self, name: str) -> ssl.SSLContext:
        """A server context with a leaf certificate for `name`, ALPN `http/1.1` only (minted off
        the event loop, within the computer's minting bounds: `MintRefusedError` beyond them)."""
        ...

    def injections(self) -> Sequence[Injection]:
        """The secrets bound now: asked again for each request."""
        ...

    @property
    def upstream_context(self) -> ssl.SSLContext:
        """A verifying client context (system store and configured CAs, check_hostname on)."""
        ...

    @property
    def strict_placeholders(self) -> bool:
        """Refuse a request that carries the placeholder of a secret for other hosts."""
        ...

    def handover(self) -> Handover | None:
        """What another host running this computer's proxy needs (None: nothing is bound)."""
        ...

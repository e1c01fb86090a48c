"""A computer's interception as a fleet host holds it: what the control plane handed over
(`Handover`: the bound secrets' injections and the org's CA), in memory only, replaced whole when
the bindings change and forgotten when the computer's egress stops. Without a handover nothing
is intercepted: every TLS connection passes through."""

from __future__ import annotations

import ssl
from collections.abc import Sequence

from .injection import Injection, applies
from .interception import Handover
from .org_ca import Minter


class HeldInterception:
    """`Interception` over a handover that may be swapped while the proxy runs."""

    def __init__(self, handover: Handover | None, upstream: ssl.SSLContext) -> None:
        self._upstream = upstream
        self._handover: Handover | None = None
        self._minter: Minter | None = None
        self.replace(handover)

    def replace(self, handover: Handover | None) -> None:
        """The secrets bound now (None: none); the next request sees them."""
        same_ca = (
            handover is not None
            and self._handover is not None
            and handover.ca_pem == self._handover.ca_pem
            and handover.ca_key_pem == self._handover.ca_key_pem
        )
        if handover is None:
            self._minter = None
        elif not same_ca:
            self._minter = Minter(handover.ca_pem, handover.ca_key_pem)
        self._handover = handover

    def forget(self) -> None:
        self.replace(None)

    def applies(self, name: str) -> bool:
        return any(applies(i, name) for i in self.injections())

    async def server_context(self, name: str) -> ssl.SSLContext:
        if self._minter is None:
            raise ssl.SSLError(f"no secret is bound for {name}")
        return await self._minter.context(name)

    def injections(self) -> Sequence[Injection]:
        return self._handover.injections if self._handover is not None else ()

    @property
    def upstream_context(self) -> ssl.SSLContext:
        return self._upstream

    @property
    def strict_placeholders(self) -> bool:
        return self._handover is not None and self._handover.strict_placeholders

    def handover(self) -> Handover | None:
        return self._handover

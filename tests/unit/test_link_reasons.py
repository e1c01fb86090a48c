"""A host link's errors say why: httpx's timeouts carry no message of their own, and a frozen
host agent (its kernel accepts the connection, nothing answers the handshake) showed as
"host h1 is unreachable: " with nothing after it."""

from __future__ import annotations

import asyncio
import socket
import ssl

import httpx
import pytest

from sanbox.fleet.link.link import CONNECT_TIMEOUT, HostLink, HostUnreachableError, why


def test_a_host_that_accepts_but_never_answers_the_handshake_is_named_as_such() -> None:
    with socket.socket() as silent:  # listening, never accepting: the kernel completes TCP
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]

        async def call() -> str:
            link = HostLink(
                "h1", f"https://127.0.0.1:{port}", ("127.0.0.1", port), ssl.create_default_context()
            )
            try:
                with pytest.raises(HostUnreachableError) as raised:
                    await link.call("describe")
                return str(raised.value)
            finally:
                await link.close()

        said = asyncio.run(asyncio.wait_for(call(), CONNECT_TIMEOUT + 5))
    assert said.startswith("host h1 is unreachable: no connection within"), said
    assert f"{CONNECT_TIMEOUT:.0f} s" in said and "frozen" in said, said


def test_every_transport_error_has_words() -> None:
    request = httpx.Request("GET", "https://h1/")
    for exc in (
        httpx.ReadTimeout("", request=request),
        httpx.WriteTimeout("", request=request),
        httpx.PoolTimeout("", request=request),
        httpx.RemoteProtocolError("", request=request),
        httpx.ConnectError("", request=request),
    ):
        assert why(exc).strip(), exc
    assert why(httpx.ConnectError("refused", request=request)) == "refused"

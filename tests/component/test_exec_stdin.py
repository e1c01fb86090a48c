"""A run-to-completion exec's input: text (`stdin`) or any bytes (`stdin_base64`), through the SDK
and raw HTTP against the real app over real HTTP. The stand-in guest runs commands as local
processes, so `sha256sum` and `od` read the very bytes the request carried."""

import asyncio
import base64
import hashlib
import json
import os
from pathlib import Path

import httpx
import pytest

from sanbox import AsyncSanbox, Sanbox
from sanbox.api.limits import MIB
from sanbox.sdk.errors import PayloadTooLargeError

from .conftest import LiveServer

pytestmark = pytest.mark.component

ODD = b"\xff\x00\x80"  # not UTF-8, a NUL, a lone continuation byte


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest() + "  -\n"


def test_bytes_reach_the_command_unchanged_through_the_sdk(live_server: LiveServer) -> None:
    noise = ODD + os.urandom(300 * 1024) + ODD
    with Sanbox(live_server.url, live_server.key) as client:
        c = client.computers.create(name="bytes-in")
        assert c.exec(["od", "-An", "-tx1"], stdin=ODD).stdout == " ff 00 80\n"
        r = c.exec("sha256sum", stdin=noise)
        assert (r.exit_code, r.stdout) == (0, digest(noise))
        assert c.exec("wc -c", stdin=bytearray(ODD)).stdout.strip() == "3"
        assert c.exec("cat", stdin="héllo\n").stdout == "héllo\n"  # text stays text
        assert c.exec("wc -c", stdin=b"").stdout.strip() == "0"
        with pytest.raises(PayloadTooLargeError):  # its base64 is over the body's limit
            c.exec("wc -c", stdin=bytes(MIB))

    async def through_the_async_sdk() -> str:
        async with AsyncSanbox(live_server.url, live_server.key) as client:
            c = await client.computers.get("bytes-in")
            return (await c.exec("sha256sum", stdin=noise)).stdout

    assert asyncio.run(through_the_async_sdk()) == digest(noise)


def test_bytes_reach_the_command_unchanged_over_raw_http(live_server: LiveServer) -> None:
    headers = {"Authorization": f"Bearer {live_server.key}"}
    with httpx.Client(base_url=live_server.url, headers=headers, timeout=60) as http:
        assert http.post("/v1/computers", json={"name": "raw-in"}).status_code == 201

        def run(data: bytes) -> httpx.Response:
            body = {"cmd": "sha256sum", "stdin_base64": base64.b64encode(data).decode()}
            return http.post("/v1/computers/raw-in/exec", json=body)

        noise = ODD + os.urandom(400 * 1024)
        r = run(noise)
        assert (r.status_code, r.json()["stdout"]) == (200, digest(noise))
        # bounded as `stdin` is, by the body: base64 decodes to 3/4 of what it takes there
        most = bytes(MIB * 3 // 4 - 1024)
        assert run(most).json()["stdout"] == digest(most)
        r = run(bytes(MIB * 3 // 4 + 1024))
        assert (r.status_code, r.json()["error"]["code"]) == (413, "payload_too_large")


REFUSED = [
    ({"stdin": "x", "stdin_base64": "eA=="}, "not both"),
    ({"stdin": "", "stdin_base64": ""}, "not both"),
    ({"stdin_base64": "not base64!"}, "stdin_base64 is not base64"),
    ({"stdin_base64": "eA"}, "stdin_base64 is not base64"),  # unpadded
    ({"stdin_base64": "eA==\n"}, "stdin_base64 is not base64"),  # a line break
    ({"stdin_base64": "_-8="}, "stdin_base64 is not base64"),  # the URL-safe alphabet
    ({"stdin_base64": "\u00e9A=="}, "stdin_base64 is not base64"),  # not ASCII
]


def test_a_bad_input_is_refused_and_nothing_runs(live_server: LiveServer, short_tmp: Path) -> None:
    mark = short_tmp / "ran"
    run = {"cmd": ["touch", str(mark)]}
    headers = {"Authorization": f"Bearer {live_server.key}"}
    with httpx.Client(base_url=live_server.url, headers=headers, timeout=60) as http:
        assert http.post("/v1/computers", json={"name": "refused"}).status_code == 201
        for body, says in REFUSED:
            r = http.post("/v1/computers/refused/exec", json={**run, **body})
            assert (r.status_code, r.json()["error"]["code"]) == (422, "validation_error"), body
            assert says in r.json()["error"]["message"], body
            assert not mark.exists(), body
        r = http.post("/v1/computers/refused/exec", json=run)
        assert r.status_code == 200 and mark.exists()  # the same call without them runs


def test_text_that_has_no_utf8_is_refused_not_an_internal_error(
    live_server: LiveServer, short_tmp: Path
) -> None:
    """JSON can escape a lone surrogate (`\\ud800`); no UTF-8 encodes it."""
    mark = short_tmp / "ran"
    headers = {"Authorization": f"Bearer {live_server.key}", "Content-Type": "application/json"}
    with httpx.Client(base_url=live_server.url, headers=headers, timeout=60) as http:
        assert http.post("/v1/computers", json={"name": "surrogate"}).status_code == 201
        # json.dumps escapes the lone surrogate as `\\ud800`
        content = json.dumps({"cmd": ["touch", str(mark)], "stdin": "a\ud800b"})
        assert "\\ud800" in content
        r = http.post("/v1/computers/surrogate/exec", content=content)
        assert (r.status_code, r.json()["error"]["code"]) == (422, "validation_error")
        assert "stdin_base64" in r.json()["error"]["message"]
        assert not mark.exists()

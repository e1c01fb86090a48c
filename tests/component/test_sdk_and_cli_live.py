"""The SDK and the CLI against the real app (store, control plane, API), over real HTTP."""

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sanbox import AsyncSanbox, Sanbox
from sanbox.cli.main import app
from sanbox.sdk._websocket import WebSocketClosedError, websockets_connector
from sanbox.sdk.errors import (
    AuthenticationError,
    ComputerNotFoundError,
    ComputerNotRunningError,
    InvalidNameError,
    InvalidPathError,
    NameTakenError,
)

from ..openapi_doc import check
from .conftest import LiveServer

pytestmark = pytest.mark.component


def test_sync_sdk_lifecycle(live_server: LiveServer, short_tmp: Path) -> None:
    with Sanbox(live_server.url, live_server.key) as client:
        c = client.computers.create(name="sdk-one", labels={"k": "v"})
        assert c.state == "running" and c.name == "sdk-one"
        result = c.exec(["sh", "-c", "echo out; echo err >&2; exit 4"])
        assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 4)
        path = f"{short_tmp}/sdk/file.bin"
        assert c.files.write(path, b"\x00\x01data") == 6
        assert c.files.read(path) == b"\x00\x01data"
        assert [e.name for e in c.files.list(f"{short_tmp}/sdk")] == ["file.bin"]
        with pytest.raises(InvalidPathError):
            c.files.read(f"{short_tmp}/../etc/passwd")
        with c.exec_stream(["sh", "-c", "read x; echo got $x"]) as stream:
            stream.send_stdin(b"hello\n")
            stream.send_eof()
            events = list(stream)
        assert b"".join(getattr(e, "data", b"") for e in events) == b"got hello\n"
        assert [c.name for c in client.computers.list(labels={"k": "v"})] == ["sdk-one"]
        with pytest.raises(NameTakenError):
            client.computers.create(name="sdk-one")
        with pytest.raises(InvalidNameError):
            client.computers.create(name="NO")
        c.stop()
        with pytest.raises(ComputerNotRunningError):
            c.exec("true")
        c.start()
        assert c.exec("true").exit_code == 0
        c.delete()
        with pytest.raises(ComputerNotFoundError):
            client.computers.get("sdk-one")
    with Sanbox(live_server.url, "sbk_wrong") as client, pytest.raises(AuthenticationError):
        client.computers.list()


def test_async_sdk(live_server: LiveServer) -> None:
    async def scenario() -> tuple[str, int]:
        async with AsyncSanbox(live_server.url, live_server.key) as client:
            c = await client.computers.create(name="async-one")
            results = await asyncio.gather(*(c.exec(f"echo {i}") for i in range(10)))
            await c.delete()
            return "".join(r.stdout for r in results), len(results)

    out, n = asyncio.run(scenario())
    assert n == 10 and sorted(out.split()) == sorted(str(i) for i in range(10))


def test_cli(live_server: LiveServer, short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANBOX_URL", live_server.url)
    monkeypatch.setenv("SANBOX_API_KEY", live_server.key)
    runner = CliRunner()
    r = runner.invoke(app, ["create", "--name", "cli-one"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["exec", "cli-one", "--", "sh", "-c", "echo hi; exit 3"])
    assert r.exit_code == 3 and "hi" in r.output
    local = short_tmp / "local.txt"
    local.write_text("payload\n")
    remote = f"{short_tmp}/remote/copied.txt"
    assert runner.invoke(app, ["cp", str(local), f"cli-one:{remote}"]).exit_code == 0
    back = short_tmp / "back.txt"
    assert runner.invoke(app, ["cp", f"cli-one:{remote}", str(back)]).exit_code == 0
    assert back.read_text() == "payload\n"
    r = runner.invoke(app, ["ls", "--json"])
    assert [c["name"] for c in json.loads(r.output)] == ["cli-one"] or "cli-one" in r.output
    r = runner.invoke(app, ["get", "nope"])
    assert r.exit_code == 1 and "computer_not_found" in r.output and "Traceback" not in r.output
    assert runner.invoke(app, ["stop", "cli-one"]).exit_code == 0
    r = runner.invoke(app, ["exec", "cli-one", "--", "true"])
    assert r.exit_code == 1 and "computer_not_running" in r.output
    assert runner.invoke(app, ["rm", "cli-one"]).exit_code == 0
    assert live_server.data_dir.computer_ids() == []


def test_websocket_pty_resize_signals_and_sse_events(live_server: LiveServer) -> None:
    async def scenario() -> tuple[bytes, int, int | None, list[str]]:
        async with AsyncSanbox(live_server.url, live_server.key) as client:
            events: list[tuple[str | None, str]] = []

            async def follow() -> None:
                async for ev in client.events(after=0):
                    events.append((ev.computer_id, ev.type))

            follower = asyncio.ensure_future(follow())
            c = await client.computers.create(name="ws-one")
            seen = [kind for cid, kind in events if cid == c.id]
            out = b""
            async with c.exec_stream(["/bin/sh"], pty=True, rows=24, cols=80) as pty:
                await pty.send_stdin(b"stty size\n")
                async for ev in pty:  # the first answer before the resize, however slow
                    out += getattr(ev, "data", b"")
                    if b"24 80" in out:
                        break
                await pty.resize(33, 99)
                await pty.send_stdin(b"stty size; exit 6\n")
                async for ev in pty:
                    out += getattr(ev, "data", b"")
                pty_exit = pty.exit
            async with c.exec_stream(["sleep", "60"]) as proc:
                await asyncio.sleep(0.3)
                await proc.signal("SIGTERM")
                term = await proc.wait()
            assert term.signal == 15  # a number end to end
            await c.delete()
            for _ in range(100):
                seen = [kind for cid, kind in events if cid == c.id]
                if "computer.deleted" in seen:
                    break
                await asyncio.sleep(0.1)
            follower.cancel()
            assert pty_exit is not None
            return out, pty_exit.exit_code, term.exit_code, seen

    out, pty_code, term_code, seen = asyncio.run(scenario())
    assert b"24 80" in out and b"33 99" in out and pty_code == 6
    assert term_code == 128 + 15
    assert seen[:2] == ["computer.creating", "computer.running"] and "computer.deleted" in seen


def test_exec_websocket_speaks_only_the_documented_messages(live_server: LiveServer) -> None:
    """Every message the server sends is an `ExecServerMessage` of docs/openapi.json; a client
    message that is not an `ExecClientMessage` (a signal by name, an unknown type) ends the
    session with a `validation_error` instead of being ignored."""

    async def session(*messages: Mapping[str, object] | bytes) -> list[dict[str, object]]:
        url = live_server.url.replace("http://", "ws://") + "/v1/computers/wire-one/exec/stream"
        headers = {"Authorization": f"Bearer {live_server.key}"}
        received = []
        async with websockets_connector(url, headers) as ws:
            for message in messages:
                if isinstance(message, bytes):
                    await ws.send_bytes(message)
                else:
                    await ws.send(json.dumps(message))
            try:
                while True:
                    received.append(check("ExecServerMessage", await ws.recv()))
            except WebSocketClosedError:
                return received

    with Sanbox(live_server.url, live_server.key) as client:
        c = client.computers.create(name="wire-one")
        start = {"type": "start", "cmd": ["sh", "-c", "kill -TERM $$"]}
        assert asyncio.run(session(start))[-1] == {
            "type": "exit",
            "exit_code": 143,
            "signal": 15,
            "timed_out": False,
        }
        cat = {"type": "start", "cmd": ["cat"]}
        for bad in ({"type": "signal", "signal": "SIGTERM"}, {"type": "shout"}, {"data": "eA=="}):
            last = asyncio.run(session(cat, bad))[-1]
            assert (last["type"], last["code"]) == ("error", "validation_error"), bad
        # a binary message, first or later, is no message of the protocol either
        for messages in ((b"{}",), (cat, b"\x00")):
            last = asyncio.run(session(*messages))[-1]
            assert (last["type"], last["code"]) == ("error", "validation_error"), messages
        # the start is checked as the HTTP exec's body is
        last = asyncio.run(session({**cat, "env": {"A=B": "1"}}))[-1]
        assert (last["type"], last["code"]) == ("error", "invalid_env"), last
        last = asyncio.run(session({**cat, "timeout": 10**9}))[-1]
        assert (last["type"], last["code"]) == ("error", "validation_error"), last
        missing = asyncio.run(session({"type": "start", "cmd": ["no-such-command"]}))
        assert missing[-1] == {"type": "exit", "exit_code": 127, "signal": None, "timed_out": False}
        c.delete()

"""The SDK and the CLI against a tiny in-memory fake of the `/v1` contract.

The fake tests the client's logic (paths, params, bodies, error mapping, streaming), not the
server. Transport injection: `Sanbox/AsyncSanbox(transport=httpx.MockTransport(fake),
ws_connector=fake.connect)`; the CLI gets the same through `sanbox.cli.config.TRANSPORT` and
`sanbox.cli.config.WS_CONNECTOR`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from fastapi import FastAPI, WebSocket
from fastapi.responses import JSONResponse
from typer.testing import CliRunner

from sanbox.cli import admin, computer, config, files, shell
from sanbox.cli.grammars import BIG_FILE
from sanbox.cli.streaming import LOGIN_SHELL
from sanbox.sdk import (
    AsyncSanbox,
    AuthenticationError,
    ComputerNotFoundError,
    ConnectionFailedError,
    Exit,
    NameTakenError,
    NotFoundError,
    PermissionDeniedError,
    Sanbox,
    Stderr,
    Stdout,
    WebSocketLike,
)
from sanbox.sdk._websocket import WebSocketClosedError
from sanbox.sdk.config import DEFAULT_URL, resolve_config

from ..openapi_doc import check
from .conftest import served

pytestmark = pytest.mark.component

KEY = "sbk_test"
ADMIN_KEY = "sbk_admin"
URL = "http://sanbox.test"


def error(status: int, code: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message}})


class FakeApi:
    """Just enough of the contract, in memory. `creating` becomes `running` on the next GET."""

    def __init__(self) -> None:
        self.computers: dict[str, dict[str, Any]] = {}
        self.files: dict[tuple[str, str], bytes] = {}
        self.requests: list[httpx.Request] = []
        self.orgs: list[dict[str, Any]] = []
        self.stream_requests: list[dict[str, Any]] = []

    def find(self, ref: str) -> dict[str, Any] | None:
        for c in self.computers.values():
            if ref in (c["id"], c["name"]) and c["state"] != "deleted":
                return c
        return None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        auth = request.headers.get("authorization")
        if auth not in (f"Bearer {KEY}", f"Bearer {ADMIN_KEY}"):
            return error(401, "unauthorized", "missing or wrong API key")
        path, q = request.url.path, request.url.params
        if path == "/v1/host":
            return httpx.Response(
                200,
                json={
                    "hypervisor": "qemu",
                    "isolation": "qemu-tcg",
                    "cpus": 2,
                    "memory_mib": 4096,
                    "reflink": True,
                },
            )
        if path in ("/v1/orgs", "/v1/keys"):
            if auth != f"Bearer {ADMIN_KEY}":
                return error(403, "forbidden", "admin key required")
            return self.admin(request)
        if path == "/v1/computers" and request.method == "POST":
            return self.create(request)
        if path == "/v1/computers":
            found = [c for c in self.computers.values() if c["state"] != "deleted"]
            if "state" in q:
                found = [c for c in found if c["state"] == q["state"]]
            for label in q.get_list("label"):
                k, _, v = label.partition("=")
                found = [c for c in found if c["labels"].get(k) == v]
            return httpx.Response(200, json={"computers": found})
        m = re.fullmatch(r"/v1/computers/([^/]+)(/.*)?", path)
        assert m, path
        c = self.find(m.group(1))
        if c is None:
            return error(404, "computer_not_found", f"no computer {m.group(1)!r}")
        return self.computer(request, c, m.group(2) or "")

    def create(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        name = body["name"] or f"c{len(self.computers) + 1}"
        if self.find(name):
            return error(409, "name_taken", f"{name} is taken")
        wait = request.url.params.get("wait", "true") == "true"
        record = {
            "id": f"cmp_{len(self.computers) + 1}",
            "name": name,
            "org": "default",
            "template": body["template"],
            "state": "running" if wait else "creating",
            "vcpus": body["vcpus"],
            "memory_mib": body["memory_mib"],
            "disk_gib": body["disk_gib"] or 8,
            "env": body["env"],
            "labels": body["labels"],
            "hypervisor": "qemu",
            "isolation": "qemu-tcg",
            "created_at": "2025-01-01T00:00:00Z",
            "updated_at": "2025-01-01T00:00:00Z",
            "last_error": None,
            "extra_field": 1,
        }
        self.computers[record["id"]] = record
        return httpx.Response(201 if wait else 202, json=record)

    def computer(self, request: httpx.Request, c: dict[str, Any], rest: str) -> httpx.Response:
        q, method = request.url.params, request.method
        if rest == "" and method == "GET":
            if c["state"] == "creating":
                c["state"] = "running"
            return httpx.Response(200, json=c)
        if rest == "" and method == "DELETE":
            c["state"] = "deleted"
            return httpx.Response(200, json=c)
        if rest in ("/start", "/stop", "/restart"):
            c["state"] = {"/stop": "stopped"}.get(rest, "running")
            return httpx.Response(200, json=c)
        if rest == "/exec":
            body = json.loads(request.content)
            if c["state"] != "running":
                return error(409, "computer_not_running", f"{c['name']} is {c['state']}")
            check("ExecRequest", body)
            out = " ".join(body["cmd"]) if isinstance(body["cmd"], list) else body["cmd"]
            answer = {
                "exit_code": 0,
                "stdout": out + (body["stdin"] or ""),
                "stderr": "",
                "signal": None,
                "timed_out": False,
                "stdout_truncated": False,
                "stderr_truncated": False,
            }
            return httpx.Response(200, json=check("ExecResponse", answer))
        if rest == "/events":
            return httpx.Response(
                200,
                json={
                    "events": [
                        {
                            "id": 1,
                            "computer_id": c["id"],
                            "type": "computer.created",
                            "message": "made",
                            "data": {},
                            "created_at": "2025-01-01T00:00:00Z",
                        }
                    ]
                },
            )
        if rest == "/console":
            return httpx.Response(200, json={"lines": ["boot", f"lines={q['lines']}"]})
        return self.file(request, c, rest)

    def file(self, request: httpx.Request, c: dict[str, Any], rest: str) -> httpx.Response:
        q, method, cid = request.url.params, request.method, c["id"]
        if rest == "/files/mkdir":
            return httpx.Response(204)
        path = q["path"]
        if not path.startswith("/"):
            return error(422, "invalid_path", "path must be absolute")
        if rest == "/files" and method == "PUT":
            self.files[(cid, path)] = request.content
            return httpx.Response(200, json={"path": path, "size": len(request.content)})
        if rest == "/files/list":
            entries = [self.entry(p, d) for (i, p), d in self.files.items() if i == cid]
            return httpx.Response(200, json={"entries": entries})
        if (cid, path) not in self.files:
            return error(404, "not_found", f"{path}: no such file")
        if rest == "/files/stat":
            return httpx.Response(200, json=self.entry(path, self.files[(cid, path)]))
        if method == "DELETE":
            del self.files[(cid, path)]
            return httpx.Response(204)
        return httpx.Response(200, content=self.files[(cid, path)])

    @staticmethod
    def entry(path: str, data: bytes) -> dict[str, Any]:
        name = path.rsplit("/", 1)[-1]
        return {
            "name": name,
            "path": path,
            "type": "file",
            "size": len(data),
            "mode": 0o644,
            "mtime": 0,
        }

    def admin(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"orgs": self.orgs})
        body = json.loads(request.content)
        if request.url.path == "/v1/orgs":
            org = {"id": f"org_{len(self.orgs) + 1}", "name": body["name"], "created_at": "now"}
            self.orgs.append(org)
            return httpx.Response(201, json=org)
        return httpx.Response(
            201, json={**body, "id": "key_1", "key": "sbk_new", "created_at": "t"}
        )

    @asynccontextmanager
    async def connect(self, url: str, headers: dict[str, str]) -> AsyncIterator[WebSocketLike]:
        assert url.startswith("ws://") and url.endswith("/exec/stream")
        assert headers == {"Authorization": f"Bearer {KEY}"}
        yield FakeExec(self)


class FakeExec:
    """The exec WebSocket: `echo` prints, `cat` echoes stdin until eof, `fail` exits 3. Every
    message either way must be what docs/openapi.json describes (`ExecClientMessage`,
    `ExecServerMessage`): the fake cannot drift from the real server unnoticed."""

    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.request: dict[str, Any] | None = None

    def emit(self, kind: str, data: bytes = b"", **fields: Any) -> None:
        self.put({"type": kind, "data": base64.b64encode(data).decode(), **fields})

    def exit(self, code: int, signal: int | None = None) -> None:
        self.put({"type": "exit", "exit_code": code, "signal": signal, "timed_out": False})

    def put(self, message: dict[str, Any]) -> None:
        self.out.put_nowait(check("ExecServerMessage", message))

    async def send(self, message: str) -> None:
        msg = check("ExecClientMessage", message)
        if self.request is None:
            assert msg["type"] == "start"
            self.request = msg
            self.api.stream_requests.append(msg)
            argv = msg["cmd"] or ["sh"]
            if argv[0] == "echo":
                self.emit("stdout", (" ".join(argv[1:]) + "\n").encode())
                self.exit(0)
            elif argv[0] == "fail":
                self.emit("stderr", b"boom\n")
                self.exit(3)
            elif argv[0] == "oops":
                self.put({"type": "error", "code": "agent_unavailable", "message": "x"})
        elif msg["type"] == "stdin":
            self.emit("stdout", base64.b64decode(msg["data"]))
        elif msg["type"] == "eof":
            self.exit(0)
        elif msg["type"] == "signal":
            self.exit(128 + msg["signal"], msg["signal"])

    async def recv(self) -> str:
        item = await self.out.get()
        if item is None:
            raise WebSocketClosedError("closed")
        return json.dumps(item)

    async def recv_message(self) -> str | bytes:
        return await self.recv()

    async def send_bytes(self, data: bytes) -> None:
        raise AssertionError("the exec stream's messages are text")


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def client(api: FakeApi) -> Iterator[Sanbox]:
    with Sanbox(URL, KEY, transport=httpx.MockTransport(api), ws_connector=api.connect) as c:
        yield c


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("SANBOX_URL", "SANBOX_API_KEY", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SANBOX_CONFIG", str(tmp_path / "absent.toml"))


# --- sync SDK


def test_create_get_list_and_lifecycle(client: Sanbox, api: FakeApi) -> None:
    c = client.computers.create(name="demo", labels={"team": "a"}, idempotency_key="k1")
    assert (c.name, c.state, c.id, c.disk_gib, c.labels) == (
        "demo",
        "running",
        "cmp_1",
        8,
        {"team": "a"},
    )
    sent = api.requests[-1]
    assert sent.headers["Idempotency-Key"] == "k1"
    assert sent.url.params["wait"] == "true"
    # the size left out stays out: the template's (an org's template restores only at its own)
    assert json.loads(sent.content) == {
        "template": "base",
        "name": "demo",
        "vcpus": None,
        "memory_mib": None,
        "disk_gib": None,
        "env": {},
        "labels": {"team": "a"},
    }
    client.computers.create(name="other")
    assert [x.name for x in client.computers.list(labels={"team": "a"})] == ["demo"]
    assert api.requests[-1].url.params.get_list("label") == ["team=a"]
    assert len(client.computers.list(state="running")) == 2
    assert c.stop() is c and c.state == "stopped"
    assert client.computers.get("demo").state == "stopped"
    assert c.start().state == "running"
    assert c.restart().state == "running"
    assert c.delete().state == "deleted"
    with pytest.raises(ComputerNotFoundError) as info:
        client.computers.get("demo")
    assert (info.value.status, info.value.code) == (404, "computer_not_found")


def test_create_without_wait_then_refresh(client: Sanbox, api: FakeApi) -> None:
    c = client.computers.create(wait=False)
    assert c.state == "creating"
    assert api.requests[-1].url.params["wait"] == "false"
    assert c.refresh().state == "running"


def test_exec_files_events_console(client: Sanbox, api: FakeApi) -> None:
    c = client.computers.create(name="box")
    result = c.exec(["echo", "hi"], stdin="!", timeout=5)
    assert (result.exit_code, result.stdout, result.ok) == (0, "echo hi!", True)
    assert json.loads(api.requests[-1].content)["timeout"] == 5
    assert c.files.write("/tmp/a.txt", "hello") == 5
    assert c.files.read("/tmp/a.txt") == b"hello"
    assert c.files.stat("/tmp/a.txt").size == 5
    assert [e.path for e in c.files.list("/tmp")] == ["/tmp/a.txt"]
    c.files.mkdir("/tmp/d")
    c.files.remove("/tmp/a.txt")
    with pytest.raises(NotFoundError):
        c.files.read("/tmp/a.txt")
    assert c.events()[0].type == "computer.created"
    assert c.console(lines=5) == ["boot", "lines=5"]


def test_exec_input_bytes_travel_as_base64(client: Sanbox, api: FakeApi) -> None:
    """Bytes go as `stdin_base64` (the fake checks the body against docs/openapi.json), text as
    `stdin`, and the new field only when used (a server from before it refuses it)."""
    c = client.computers.create(name="box")
    c.exec("cat", stdin=b"\xff\x00\x80")
    body = json.loads(api.requests[-1].content)
    assert (body["stdin"], body["stdin_base64"]) == (None, "/wCA")
    c.exec("cat", stdin="text")
    body = json.loads(api.requests[-1].content)
    assert body["stdin"] == "text" and "stdin_base64" not in body


def test_upload_and_download_stream_with_progress(
    client: Sanbox, api: FakeApi, tmp_path: Path
) -> None:
    c = client.computers.create(name="box")
    local = tmp_path / "big.bin"
    local.write_bytes(bytes(range(256)) * 10_000)
    seen: list[tuple[int, int | None]] = []
    assert c.files.upload(local, "/data/big.bin", progress=lambda d, t: seen.append((d, t))) == (
        2_560_000
    )
    assert seen[-1] == (2_560_000, 2_560_000) and len(seen) == 3
    assert c.files.write("/data/copy.bin", local) == 2_560_000  # a Path is a local file
    out = tmp_path / "back.bin"
    assert c.files.download("/data/copy.bin", out) == 2_560_000
    assert out.read_bytes() == local.read_bytes()


def test_exec_stream_sync(client: Sanbox, api: FakeApi) -> None:
    c = client.computers.create(name="box")
    with c.exec_stream(["cat"], env={"A": "1"}) as stream:
        stream.send_stdin(b"one ")
        stream.send_stdin("two")
        stream.send_eof()
        events = list(stream)
    assert events == [Stdout(b"one "), Stdout(b"two"), Exit(0)]
    assert api.stream_requests[-1] == {
        "type": "start",
        "cmd": ["cat"],
        "env": {"A": "1"},
        "cwd": None,
        "user": None,
        "timeout": None,
        "pty": False,
        "rows": 24,
        "cols": 80,
    }
    with c.exec_stream(["fail"]) as stream:
        assert list(stream) == [Stderr(b"boom\n"), Exit(3)]
    for name in ("SIGTERM", "TERM", "term", 15, "15"):  # names become Linux's numbers
        with c.exec_stream(["cat"]) as stream:
            stream.signal(name)
            assert stream.wait() == Exit(128 + 15, 15)
    with c.exec_stream(["cat"]) as stream, pytest.raises(ValueError, match="unknown signal"):
        stream.signal("SIGNOPE")
    with c.exec_stream(["oops"]) as stream, pytest.raises(Exception) as info:
        stream.wait()
    assert getattr(info.value, "code", None) == "agent_unavailable"


def test_admin_and_host(client: Sanbox, api: FakeApi) -> None:
    assert client.host().cpus == 2
    with pytest.raises(PermissionDeniedError):
        client.orgs.create("acme")
    with Sanbox(URL, ADMIN_KEY, transport=httpx.MockTransport(api)) as admin_client:
        assert admin_client.orgs.create("acme").name == "acme"
        assert [o.name for o in admin_client.orgs.list()] == ["acme"]
        key = admin_client.keys.create("acme", name="ci", admin=True)
    assert (key.key, key.org, key.admin, key.name) == ("sbk_new", "acme", True, "ci")


def test_errors_are_typed(client: Sanbox, api: FakeApi) -> None:
    client.computers.create(name="demo")
    with pytest.raises(NameTakenError) as info:
        client.computers.create(name="demo")
    assert info.value.status == 409
    with (
        Sanbox(URL, "wrong", transport=httpx.MockTransport(api)) as bad,
        pytest.raises(AuthenticationError),
    ):
        bad.computers.list()


def test_unreachable_server_says_so() -> None:
    with (
        Sanbox("http://127.0.0.1:9", KEY, timeout=5) as c,
        pytest.raises(ConnectionFailedError, match="is `sanbox server` running"),
    ):
        c.host()


def test_sync_client_accepts_a_sync_only_transport(api: FakeApi) -> None:
    class SyncOnly(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            request.read()
            return api(request)

    with Sanbox(URL, KEY, transport=SyncOnly()) as c:
        box = c.computers.create(name="sync")
        assert box.files.write("/f", b"x" * 10) == 10
        assert box.files.read("/f") == b"x" * 10


# --- async SDK


def test_async_client(api: FakeApi, tmp_path: Path) -> None:
    async def scenario() -> None:
        transport = httpx.MockTransport(api)
        async with AsyncSanbox(URL, KEY, transport=transport, ws_connector=api.connect) as client:
            c = await client.computers.create(name="a", wait=False)
            assert c.state == "creating"
            assert (await c.refresh()).state == "running"
            assert (await c.exec("uname")).stdout == "uname"
            assert await c.files.write("/x", b"data") == 4
            assert await c.files.read("/x") == b"data"
            async with c.exec_stream(["echo", "hey"]) as stream:
                assert [e async for e in stream] == [Stdout(b"hey\n"), Exit(0)]
            assert [x.name for x in await client.computers.list()] == ["a"]
            await c.stop()
            assert c.state == "stopped"
            with pytest.raises(ComputerNotFoundError):
                await client.computers.get("nope")

    asyncio.run(scenario())


def test_async_client_over_asgi_http_and_websocket() -> None:
    app = FastAPI()
    record = {"id": "cmp_1", "name": "a", "state": "running"}

    @app.get("/v1/computers/{ref}")
    async def get(ref: str) -> dict[str, Any]:
        return record

    @app.websocket("/v1/computers/{ref}/exec/stream")
    async def stream(ws: WebSocket) -> None:
        assert ws.headers["authorization"] == f"Bearer {KEY}"
        await ws.accept()
        first = check("ExecClientMessage", await ws.receive_json())
        data = base64.b64encode(" ".join(first["cmd"]).encode()).decode()
        await ws.send_json({"type": "stdout", "data": data})
        exit = {"type": "exit", "exit_code": 7, "signal": None, "timed_out": False}
        await ws.send_json(check("ExecServerMessage", exit))
        await ws.close()

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with AsyncSanbox("http://test", KEY, transport=transport) as client:
            c = await client.computers.get("a")
            async with c.exec_stream(["ls", "-l"]) as s:
                assert [e async for e in s] == [Stdout(b"ls -l"), Exit(7)]

    asyncio.run(scenario())


# --- configuration


def test_config_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert resolve_config() == resolve_config(None, None)
    assert resolve_config().url == DEFAULT_URL and resolve_config().api_key is None
    file = tmp_path / "config.toml"
    file.write_text('url = "http://from-file:7070/"\napi_key = "sbk_file"\n')
    monkeypatch.setenv("SANBOX_CONFIG", str(file))
    assert (resolve_config().url, resolve_config().api_key) == ("http://from-file:7070", "sbk_file")
    monkeypatch.setenv("SANBOX_URL", "http://from-env:1")
    monkeypatch.setenv("SANBOX_API_KEY", "sbk_env")
    assert (resolve_config().url, resolve_config().api_key) == ("http://from-env:1", "sbk_env")
    assert resolve_config("http://arg", "sbk_arg").api_key == "sbk_arg"
    monkeypatch.delenv("SANBOX_CONFIG")
    monkeypatch.delenv("SANBOX_URL")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "xdg" / "sanbox").mkdir(parents=True)
    (tmp_path / "xdg" / "sanbox" / "config.toml").write_text('url = "http://xdg"\n')
    assert resolve_config().url == "http://xdg"


def test_client_sends_the_resolved_key(monkeypatch: pytest.MonkeyPatch, api: FakeApi) -> None:
    monkeypatch.setenv("SANBOX_API_KEY", KEY)
    monkeypatch.setenv("SANBOX_URL", URL)
    with Sanbox(transport=httpx.MockTransport(api)) as c:
        assert c.url == URL
        c.computers.list()
    assert api.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    assert str(api.requests[-1].url) == f"{URL}/v1/computers"


# --- CLI


@pytest.fixture
def cli(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setattr(config, "TRANSPORT", httpx.MockTransport(api))
    monkeypatch.setattr(config, "WS_CONNECTOR", api.connect)
    monkeypatch.setenv("SANBOX_URL", URL)
    monkeypatch.setenv("SANBOX_API_KEY", KEY)
    return CliRunner()


def sanbox_app() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)
    for module in (computer, shell, files, admin, config):
        module.register(app)
    return app


def run(cli: CliRunner, *args: str, input: str | None = None) -> Any:
    return cli.invoke(sanbox_app(), list(args), input=input)


def test_cli_create_waits_until_running(cli: CliRunner, api: FakeApi) -> None:
    """The CLI's create waits for the server's answer: running, or the typed error (a failed
    create leaves no computer to poll)."""
    result = run(
        cli,
        "create",
        "--name",
        "demo",
        "--cpus",
        "2",
        "--memory",
        "1024",
        "--env",
        "A=1",
        "--label",
        "team=x",
    )
    assert result.exit_code == 0, result.output
    assert "running demo cmp_1" in result.stdout
    assert api.requests[0].url.params["wait"] == "true"
    body = json.loads(api.requests[0].content)
    assert (body["vcpus"], body["memory_mib"], body["env"], body["labels"]) == (
        2,
        1024,
        {"A": "1"},
        {"team": "x"},
    )
    assert len(api.requests) == 1
    bad = run(cli, "create", "--env", "nonsense")
    assert bad.exit_code == 1 and "error (invalid_argument)" in bad.stderr


def test_cli_ls_get_json_and_table(cli: CliRunner, api: FakeApi) -> None:
    run(cli, "create", "--name", "a", "--label", "team=x")
    run(cli, "create", "--name", "b")
    listed = run(cli, "ls", "--json", "--label", "team=x")
    assert [c["name"] for c in json.loads(listed.stdout)] == ["a"]
    table = run(cli, "ls")
    assert "NAME" in table.stdout and "cmp_2" in table.stdout
    got = run(cli, "get", "b", "--json")
    assert json.loads(got.stdout)["id"] == "cmp_2"
    assert "memory_mib" in run(cli, "get", "b").stdout


def test_cli_errors_are_one_line(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(cli, "get", "ghost")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error (computer_not_found) no computer 'ghost'"
    monkeypatch.setenv("SANBOX_API_KEY", "wrong")
    result = run(cli, "ls")
    assert result.exit_code == 1 and "error (unauthorized)" in result.stderr
    assert "Traceback" not in result.output


def test_cli_exec_streams_and_exits_with_the_code(cli: CliRunner, api: FakeApi) -> None:
    run(cli, "create", "--name", "box")
    result = run(cli, "exec", "box", "--", "echo", "hello", "world")
    assert (result.exit_code, result.stdout) == (0, "hello world\n")
    failed = run(cli, "exec", "box", "--env", "A=1", "--cwd", "/tmp", "fail")
    assert (failed.exit_code, failed.stderr) == (3, "boom\n")
    assert api.stream_requests[-1]["env"] == {"A": "1"}
    assert api.stream_requests[-1]["cwd"] == "/tmp"
    piped = run(cli, "exec", "box", "--", "cat", input="from stdin")
    assert (piped.exit_code, piped.stdout) == (0, "from stdin")
    missing = run(cli, "exec", "ghost", "--", "echo")
    assert missing.exit_code == 1 and "computer_not_found" in missing.stderr


def test_cli_shell_without_a_tty_forwards_stdin(cli: CliRunner, api: FakeApi) -> None:
    """Its input no terminal: the user's login shell without a PTY, as ssh gives none (a PTY's
    shell never sees the input's end)."""
    run(cli, "create", "--name", "box")
    result = run(cli, "shell", "box", input="ls\n")
    assert (result.exit_code, result.stdout) == (0, "ls\n")
    assert api.stream_requests[-1]["pty"] is False
    assert api.stream_requests[-1]["cmd"] == LOGIN_SHELL


def test_cli_cp_both_ways(cli: CliRunner, api: FakeApi, tmp_path: Path) -> None:
    run(cli, "create", "--name", "box")
    local = tmp_path / "notes.txt"
    local.write_text("hello")
    up = run(cli, "cp", str(local), "box:/root/")
    assert up.exit_code == 0, up.output
    assert api.files[("cmp_1", "/root/notes.txt")] == b"hello"
    down = run(cli, "cp", "box:/root/notes.txt", str(tmp_path / "out"))
    assert down.exit_code == 0, down.output
    assert (tmp_path / "out").read_text() == "hello"
    (tmp_path / "dir").mkdir()
    assert run(cli, "cp", "box:/root/notes.txt", str(tmp_path / "dir")).exit_code == 0
    assert (tmp_path / "dir" / "notes.txt").read_text() == "hello"
    assert "error (invalid_argument)" in run(cli, "cp", "a", "b").stderr
    assert "error (not_found)" in run(cli, "cp", "box:/nope", str(tmp_path / "x")).stderr


def test_cli_cp_big_file_shows_progress(cli: CliRunner, api: FakeApi, tmp_path: Path) -> None:
    run(cli, "create", "--name", "box")
    big = tmp_path / "big"
    big.write_bytes(b"z" * (BIG_FILE * 2))
    result = run(cli, "cp", str(big), "box:/big")
    assert result.exit_code == 0 and f"copied {BIG_FILE * 2} bytes" in result.stderr


def test_cli_lifecycle_rm_and_logs(cli: CliRunner, api: FakeApi) -> None:
    run(cli, "create", "--name", "box")
    assert "stopped box" in run(cli, "stop", "box").stdout
    assert api.computers["cmp_1"]["state"] == "stopped"
    assert "started box" in run(cli, "start", "box").stdout
    assert "restarted box" in run(cli, "restart", "box").stdout
    logs = run(cli, "logs", "box")
    assert "computer.created" in logs.stdout and "made" in logs.stdout
    assert run(cli, "logs", "box", "--console", "-n", "7").stdout.splitlines() == [
        "boot",
        "lines=7",
    ]
    assert "deleted box" in run(cli, "rm", "box").stdout
    assert api.computers["cmp_1"]["state"] == "deleted"
    assert run(cli, "rm", "box").exit_code == 1
    assert run(cli, "rm", "--force", "box").exit_code == 0


def test_cli_admin(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "error (forbidden)" in run(cli, "org", "create", "acme").stderr
    monkeypatch.setenv("SANBOX_API_KEY", ADMIN_KEY)
    assert "created org acme" in run(cli, "org", "create", "acme").stdout
    assert "acme" in run(cli, "org", "ls").stdout
    assert json.loads(run(cli, "org", "ls", "--json").stdout)[0]["name"] == "acme"
    key = run(cli, "key", "create", "--org", "acme", "--name", "ci", "--admin")
    assert key.exit_code == 0 and key.stdout.strip() == "sbk_new"


def test_cli_config_set_and_show(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "config.toml"
    monkeypatch.setenv("SANBOX_CONFIG", str(path))
    cli = CliRunner()
    assert (
        run(cli, "config", "set", "--url", "http://h:1", "--api-key", "sbk_123456789").exit_code
        == 0
    )
    assert path.stat().st_mode & 0o777 == 0o600
    assert resolve_config().url == "http://h:1"
    shown = run(cli, "config", "show").stdout
    assert "http://h:1" in shown and "sbk_1234…" in shown and "sbk_123456789" not in shown


# --- real sockets: how a test runs the sync SDK against an ASGI app (uvicorn in a thread)


@pytest.fixture
def served_app() -> Iterator[str]:
    app = FastAPI()

    @app.get("/v1/computers/{ref}")
    async def get(ref: str) -> Any:
        if ref != "a":
            return JSONResponse(
                {"error": {"code": "computer_not_found", "message": ref}}, status_code=404
            )
        return {"id": "cmp_1", "name": "a", "state": "running"}

    @app.websocket("/v1/computers/{ref}/exec/stream")
    async def stream(ws: WebSocket) -> None:
        await ws.accept()
        first = check("ExecClientMessage", await ws.receive_json())
        message = check("ExecClientMessage", await ws.receive_json())  # one stdin, echoed
        await ws.send_json({"type": "stdout", "data": message["data"]})
        exit = {"type": "exit", "exit_code": len(first["cmd"]), "signal": None, "timed_out": False}
        await ws.send_json(check("ExecServerMessage", exit))
        await ws.close()

    with served(app) as url:
        yield url


def test_sync_client_over_real_http_and_websocket(served_app: str) -> None:
    with Sanbox(served_app, KEY) as client:
        c = client.computers.get("a")
        with c.exec_stream(["a", "b"]) as stream:
            stream.send_stdin(b"ping")
            assert list(stream) == [Stdout(b"ping"), Exit(2)]
        with pytest.raises(ComputerNotFoundError):
            client.computers.get("zz")

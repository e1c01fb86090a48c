"""Secrets through the SDK, the CLI and the MCP tools against the real app, over real HTTP: set,
list, get, rotate, bind, unbind, delete; refused inputs; and the value in nothing that comes back
(records, errors, the audit log, events, CLI output, tool results) nor in the database file.

A running computer's next commands get the placeholders; the org's CA is not installed here (this
tier's machines are local processes: their store is the host's). (The proxy adding the value to
requests: tests/integration; a computer created with secrets, end to end: tests/vm.)
"""

from __future__ import annotations

import asyncio
import json
import stat

import httpx
import pytest
from typer.testing import CliRunner

from sanbox.cli.main import app
from sanbox.sdk import (
    BindingNotFoundError,
    ComputerNotFoundError,
    InvalidSecretError,
    Sanbox,
    SecretNotFoundError,
)

from .conftest import LiveServer, Server

pytestmark = pytest.mark.component

VALUE = "sk-first-0123456789abcdef"
ROTATED = "sk-second-fedcba9876543210"


def api_text(live: LiveServer, *paths: str) -> str:
    """The raw answers of `paths`, joined: what any client could read back."""
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {live.key}"}) as api:
        return "\n".join(api.get(path).text for path in paths)


def stored_bytes(live: LiveServer) -> bytes:
    return b"".join(p.read_bytes() for p in live.data_dir.root.glob("sanbox.db*"))


def test_secret_lifecycle(live_server: LiveServer) -> None:
    with Sanbox(live_server.url, live_server.key) as client:
        made = client.secrets.set("openai", VALUE, ["api.openai.com", "*.example.com"])
        assert made.id.startswith("sec_") and made.version == 1 and not made.placeholder_only
        assert sorted(made.hosts) == ["*.example.com", "api.openai.com"]
        assert made.header == "Authorization: Bearer {value}"
        assert [s.name for s in client.secrets.list()] == ["openai"]
        assert client.secrets.get("openai") == made

        rotated = client.secrets.set("openai", ROTATED, ["api.openai.com"], header="X-Key: {value}")
        assert (rotated.id, rotated.version, rotated.hosts) == (made.id, 2, ["api.openai.com"])
        assert rotated.header == "X-Key: {value}"
        quiet = client.secrets.set("quiet", VALUE, ["api.example.org"], placeholder_only=True)
        assert quiet.placeholder_only and quiet.header is None

        computer = client.computers.create(name="sec-one")
        computer.stop()
        bound = client.secrets.bind("openai", "sec-one", env="OPENAI_API_KEY")
        assert (bound.secret, bound.computer, bound.env) == (
            "openai",
            computer.id,
            "OPENAI_API_KEY",
        )
        assert bound.placeholder.startswith("sbx_ph_") and VALUE not in bound.placeholder
        assert client.secrets.bindings(computer.id) == [bound]
        again = client.secrets.bind("openai", "sec-one")  # a new variable, the same placeholder
        assert (again.env, again.placeholder) == (None, bound.placeholder)
        unbound = client.secrets.unbind("openai", "sec-one")
        assert unbound.placeholder == bound.placeholder
        assert client.secrets.bindings("sec-one") == []
        with pytest.raises(BindingNotFoundError):
            client.secrets.unbind("openai", "sec-one")
        with pytest.raises(ComputerNotFoundError):
            client.secrets.bind("openai", "nope")
        with pytest.raises(SecretNotFoundError):
            client.secrets.bind("nope", "sec-one")

        client.secrets.bind("quiet", "sec-one", env="QUIET")
        deleted = client.secrets.delete("quiet")  # its bindings go with it
        assert deleted.name == "quiet" and client.secrets.bindings("sec-one") == []
        with pytest.raises(SecretNotFoundError):
            client.secrets.get("quiet")
        with pytest.raises(SecretNotFoundError):
            client.secrets.delete("quiet")

        # a create that names a secret the org does not have makes nothing
        with pytest.raises(SecretNotFoundError):
            client.computers.create(name="sec-two", secrets={"nope": "NOPE"})
        assert [c.name for c in client.computers.list()] == ["sec-one"]
        seen = api_text(
            live_server,
            "/v1/secrets",
            "/v1/audit?limit=1000",
            f"/v1/computers/{computer.id}/events",
        )
        assert "secret.bound" in seen  # the events are there, without the value
        computer.delete()
        client.secrets.delete("openai")

    for value in (VALUE, ROTATED):
        assert value not in seen
        assert value.encode() not in stored_bytes(live_server)  # sealed at rest
    key_file = live_server.data_dir.root / "host" / "secrets.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("value", "hosts", "header", "placeholder_only"),
    [
        (VALUE, ["not a host"], None, False),
        (VALUE, ["https://api.openai.com/v1"], None, False),
        (VALUE, ["*"], None, False),
        (VALUE, ["10.0.0.0/8:443"], None, False),
        (VALUE, [], None, False),
        (VALUE, ["api.openai.com"], "Authorization: Bearer", False),  # no {value}
        (VALUE, ["api.openai.com"], "no colon {value}", False),
        (VALUE, ["api.openai.com"], "Host: {value}", False),
        (VALUE, ["api.openai.com"], "X-Key: {value}", True),  # a header and placeholder only
        ("", ["api.openai.com"], None, False),
        (VALUE + "\r\nX-Evil: 1", ["api.openai.com"], None, False),
        (VALUE + "\x00", ["api.openai.com"], None, False),
        ("k" * 8193, ["api.openai.com"], None, False),
    ],
)
def test_refused_secrets_keep_nothing_and_say_nothing_of_the_value(
    live_server: LiveServer,
    value: str,
    hosts: list[str],
    header: str | None,
    placeholder_only: bool,
) -> None:
    with Sanbox(live_server.url, live_server.key) as client:
        with pytest.raises(InvalidSecretError) as refused:
            client.secrets.set(
                "bad", value, hosts, header=header, placeholder_only=placeholder_only
            )
        said = f"{refused.value} {refused.value!r} {refused.value.message}"
        assert VALUE not in said and "kkkkkkkk" not in said
        assert client.secrets.list() == []


def test_cli_secret_set_reads_stdin(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANBOX_URL", live_server.url)
    monkeypatch.setenv("SANBOX_API_KEY", live_server.key)
    runner = CliRunner()
    r = runner.invoke(
        app,
        ["secret", "set", "cli-key", "--value-stdin", "--host", "api.example.com"],
        input=VALUE + "\n",
    )
    assert r.exit_code == 0, r.output
    assert "cli-key" in r.output and "version 1" in r.output and VALUE not in r.output
    r = runner.invoke(
        app, ["secret", "set", "cli-key", "--value-stdin", "--host", "x y"], input=ROTATED
    )
    assert r.exit_code == 1 and "error (invalid_secret)" in r.output and ROTATED not in r.output
    r = runner.invoke(app, ["secret", "ls", "--json"])
    assert [s["name"] for s in json.loads(r.output)] == ["cli-key"] and VALUE not in r.output
    r = runner.invoke(app, ["secret", "get", "cli-key", "--json"])
    assert json.loads(r.output)["version"] == 1
    r = runner.invoke(app, ["secret", "bind", "cli-key", "nope", "--env", "KEY"])
    assert r.exit_code == 1 and "error (computer_not_found)" in r.output
    assert runner.invoke(app, ["secret", "rm", "cli-key"]).exit_code == 0
    r = runner.invoke(app, ["secret", "get", "cli-key"])
    assert r.exit_code == 1 and "error (secret_not_found)" in r.output


def test_mcp_tools_bind_but_never_set(live_server: LiveServer) -> None:
    from .test_mcp import call, over_http, structured, text

    with Sanbox(live_server.url, live_server.key) as client:
        client.secrets.set("openai", VALUE, ["api.openai.com"])
        client.computers.create(name="sec-mcp").stop()

    async def scenario() -> list[str]:
        said: list[str] = []
        async with over_http(live_server.url, live_server.key) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert {"list_secrets", "bind_secret", "unbind_secret"} <= set(tools)
            schemas = json.dumps([t.input_schema for t in tools.values() if "secret" in t.name])
            assert "value" not in schemas  # no tool takes a secret's value
            hints = tools["list_secrets"].annotations
            assert hints is not None and hints.read_only_hint

            listed = await call(session, "list_secrets")
            assert [s["name"] for s in structured(listed)["secrets"]] == ["openai"]
            bound = await call(
                session, "bind_secret", computer="sec-mcp", name="openai", env="OPENAI_API_KEY"
            )
            assert not bound.is_error, text(bound)
            placeholder = structured(bound)["binding"]["placeholder"]
            assert "$OPENAI_API_KEY" in text(bound) and placeholder in text(bound)
            listed = await call(session, "list_secrets", computer="sec-mcp")
            assert [b["placeholder"] for b in structured(listed)["bindings"]] == [placeholder]
            gone = await call(session, "unbind_secret", computer="sec-mcp", name="openai")
            assert not gone.is_error, text(gone)
            again = await call(session, "unbind_secret", computer="sec-mcp", name="openai")
            assert structured(again)["error"]["code"] == "binding_not_found"
            for result in (listed, bound, gone, again):
                said.append(text(result) + json.dumps(structured(result)))
        return said

    said = asyncio.run(scenario())
    assert all(VALUE not in s for s in said)
    with Sanbox(live_server.url, live_server.key) as client:
        client.computers.get("sec-mcp").delete()


def test_a_running_computer_gets_placeholders_in_new_commands(live_server: LiveServer) -> None:
    """Bound, unbound and rebound on a running computer: its next command's environment follows
    at once (the CA itself is not installed here: this tier's machines are not isolated)."""
    with Sanbox(live_server.url, live_server.key) as client:
        client.secrets.set("live", VALUE, ["api.live.test"])
        computer = client.computers.create(name="sec-live")
        assert computer.exec(["printenv", "LIVE_KEY"]).exit_code == 1
        bound = client.secrets.bind("live", "sec-live", env="LIVE_KEY")
        env = computer.exec(["env"]).stdout
        assert f"LIVE_KEY={bound.placeholder}\n" in env and VALUE not in env
        assert "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" in env
        assert "NODE_EXTRA_CA_CERTS=" in env
        client.secrets.unbind("live", "sec-live")
        env = computer.exec(["env"]).stdout
        assert "LIVE_KEY=" not in env and "SSL_CERT_FILE=" not in env
        created = client.computers.create(name="sec-born", secrets={"live": "LIVE_KEY"})
        assert created.exec(["printenv", "LIVE_KEY"]).stdout.strip() == bound.placeholder
        for c in (computer, created):
            c.delete()
        client.secrets.delete("live")


def test_a_value_stored_shorter_than_the_leak_scan_sees_is_not_injected(server: Server) -> None:
    """A value under 8 bytes, stored before values were 8 bytes at least, is not handed to the
    egress proxy: the scan of responses would not see it come back to the computer. The others
    bound beside it are."""
    from sqlalchemy import select

    from sanbox.control.secret_book import secret_context
    from sanbox.store.models import SecretRow

    h = server.headers()
    assert server.client.post("/v1/computers", json={"name": "old"}, headers=h).status_code == 201
    for name in ("short", "long"):
        body = {"value": VALUE, "hosts": ["api.example.com"]}
        assert server.client.put(f"/v1/secrets/{name}", json=body, headers=h).status_code < 300
        bind = server.client.put(f"/v1/computers/old/secrets/{name}", json={}, headers=h)
        assert bind.status_code < 300, bind.text
    computers = server.client.app.state.computers  # type: ignore[attr-defined]
    book = computers.fleet.book
    with computers.fleet.db.session() as s:  # as a server from before the rule stored it
        row = s.scalars(select(SecretRow).where(SecretRow.name == "short")).one()
        row.sealed = book.sealer.seal(b"sk-1", secret_context(row))
        computer_id = server.client.get("/v1/computers/old", headers=h).json()["id"]
    book.changed()
    injected = book.bound(computer_id).injections
    assert [i.value for i in injected] == [VALUE.encode()]

"""Keys and audit from the SDK and the CLI, over real HTTP against the real app: a key made by
`sanbox key create` works until `sanbox key revoke`, then is refused at once; `sanbox key ls`
never shows a key; `sanbox audit` shows who did it, from where."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from sanbox import AsyncSanbox, Sanbox
from sanbox.cli.main import app
from sanbox.sdk.errors import AuthenticationError, PermissionDeniedError

from .conftest import LiveServer

pytestmark = pytest.mark.component


def test_cli_key_create_ls_revoke_and_audit(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANBOX_URL", live_server.url)
    monkeypatch.setenv("SANBOX_API_KEY", live_server.key)
    runner = CliRunner()
    r = runner.invoke(app, ["key", "create", "--name", "ci", "--expires-in", "1d", "--json"])
    assert r.exit_code == 0, r.output
    made = json.loads(r.output)
    assert made["key"].startswith("sbk_") and made["expires_at"] and made["org"] == "default"
    r = runner.invoke(app, ["key", "ls", "--json"])
    listed = {k["id"]: k for k in json.loads(r.output)}
    assert listed[made["id"]]["prefix"] == made["prefix"] and made["key"] not in r.output
    assert listed[made["id"]]["key"] is None
    r = runner.invoke(app, ["key", "ls"])
    assert r.exit_code == 0 and made["id"] in r.output and made["key"] not in r.output

    with Sanbox(live_server.url, made["key"]) as client:
        assert client.computers.list() == []
        with pytest.raises(PermissionDeniedError):
            client.keys.list()  # not an admin key
    r = runner.invoke(app, ["key", "revoke", made["id"]])
    assert r.exit_code == 0 and f"revoked key {made['id']}" in r.output
    with Sanbox(live_server.url, made["key"]) as client, pytest.raises(AuthenticationError) as e:
        client.computers.list()
    assert "revoked" in e.value.message
    r = runner.invoke(app, ["key", "ls", "--json"])
    assert next(k for k in json.loads(r.output) if k["id"] == made["id"])["revoked_at"]

    r = runner.invoke(app, ["audit", "--json", "--limit", "2"])
    assert r.exit_code == 0, r.output
    records = json.loads(r.output)
    assert [(x["action"], x["status"]) for x in records] == [
        ("POST /v1/keys", 201),
        ("DELETE /v1/keys/{key_id}", 200),
    ]
    assert records[1]["target"] == {"key_id": made["id"]}
    assert records[1]["key_prefix"] == live_server.key[:12] and records[1]["client"] == "127.0.0.1"
    r = runner.invoke(app, ["audit"])
    assert r.exit_code == 0 and "DELETE" in r.output and made["key"] not in r.output

    r = runner.invoke(app, ["key", "create", "--expires-in", "soon"])
    assert r.exit_code == 1 and "invalid_argument" in r.output
    monkeypatch.setenv("SANBOX_API_KEY", made["key"])
    r = runner.invoke(app, ["audit"])
    assert r.exit_code == 1 and "unauthorized" in r.output and "Traceback" not in r.output


def test_async_sdk_keys_and_audit(live_server: LiveServer) -> None:
    async def scenario() -> None:
        async with AsyncSanbox(live_server.url, live_server.key) as root:
            await root.orgs.create("acme")
            admin = await root.keys.create("acme", name="acme admin", admin=True)
            assert admin.key and admin.org == "acme" and admin.admin and not admin.host_admin
            async with AsyncSanbox(live_server.url, admin.key) as acme:
                user = await acme.keys.create(name="bot", expires_in=3600)
                assert user.org == "acme" and user.expires_at
                assert {k.id for k in await acme.keys.list()} == {admin.id, user.id}
                with pytest.raises(PermissionDeniedError):
                    await acme.keys.list(org="default")
                revoked = await acme.keys.revoke(user.id)
                assert revoked.revoked_at and revoked.key is None
                actions = [r.action for r in await acme.audit.list()]
                assert actions == ["POST /v1/keys", "DELETE /v1/keys/{key_id}"]
            everything = await root.audit.list(limit=1000)
            assert {r.org for r in everything} == {"default", "acme"}
            first = everything[0].id
            assert [r.id for r in await root.audit.list(after=first, limit=1)] == [first + 1]

    asyncio.run(scenario())

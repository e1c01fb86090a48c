"""Keys and audit, as the attacks they defend against, through the real API (store, control plane,
routes, middleware): a revoked or expired key is refused on its very next request, and a live
connection it opened ends within a re-check; an org's admin
cannot reach beyond its org; a burst of wrong keys from one address is refused until its window
passes; every request that means to change something is on the audit, failed ones included, and
no key or token ever is. The clock the server reads is the test's."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from sanbox.api import ServerSettings, create_app, standing
from sanbox.control.audit import AuditEntry, AuditLog
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime
from sanbox.store import AuditRow, Database

from .conftest import fake_image

pytestmark = pytest.mark.component
CLIENT = ("203.0.113.7", 40000)
T = TypeVar("T")


class Clock:
    """Wall-clock seconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Api:
    client: TestClient
    root_key: str  # the first start's key: a host admin
    clock: Clock

    def h(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.root_key}"}

    def call(self, method: str, path: str, key: str | None = None, **kw: Any) -> Any:
        return self.client.request(method, path, headers=self.h(key), **kw)

    def new_org(self, name: str) -> None:
        assert self.call("POST", "/v1/orgs", json={"name": name}).status_code == 201

    def new_key(self, key: str | None = None, **body: Any) -> dict[str, Any]:
        r = self.call("POST", "/v1/keys", key, json=body)
        assert r.status_code == 201, r.text
        created: dict[str, Any] = r.json()
        return created

    def audit(self, key: str | None = None, **params: Any) -> list[dict[str, Any]]:
        r = self.client.get("/v1/audit", headers=self.h(key), params=params)
        assert r.status_code == 200, r.text
        records: list[dict[str, Any]] = r.json()["records"]
        return records


def error(r: Any) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


@pytest.fixture
def api(short_tmp: Path) -> Iterator[Api]:
    dd = DataDir(short_tmp / "data")
    dd.ensure()
    fake_image(dd)
    clock = Clock()
    settings = ServerSettings(data_dir=dd.root, client_config=None, watch_interval=0.2)
    runtime = HostRuntime(dd, LocalDriver(), networking=False)
    app = create_app(settings, runtime, clock=clock)
    with TestClient(app, client=CLIENT) as client:
        yield Api(client, app.state.first_key, clock)


def test_a_revoked_key_is_refused_on_its_next_request(api: Api) -> None:
    made = api.new_key(name="ci")
    key = made["key"]
    assert api.call("GET", "/v1/computers", key).status_code == 200
    listed = api.call("GET", "/v1/keys").json()["keys"]
    ci = next(k for k in listed if k["id"] == made["id"])
    assert ci["prefix"] == key[:12] and ci["revoked_at"] is None and "key" not in ci
    assert key not in api.call("GET", "/v1/keys").text

    r = api.call("DELETE", f"/v1/keys/{made['id']}")
    assert r.status_code == 200 and key not in r.text
    revoked_at = r.json()["revoked_at"]
    assert revoked_at is not None
    r = api.call("GET", "/v1/computers", key)
    assert error(r) == (401, "unauthorized")
    assert "revoked" in r.json()["error"]["message"] and "new one" in r.json()["error"]["message"]
    with api.client.websocket_connect("/v1/computers/x/exec/stream", headers=api.h(key)) as ws:
        answer = json.loads(ws.receive_text())
    assert (answer["type"], answer["code"]) == ("error", "unauthorized")
    assert "revoked" in answer["message"]
    api.clock.advance(5)
    again = api.call("DELETE", f"/v1/keys/{made['id']}")  # revoking again changes nothing
    assert again.status_code == 200 and again.json()["revoked_at"] == revoked_at


def test_an_expired_key_is_refused(api: Api) -> None:
    key = api.new_key(name="short", expires_in=60)
    assert key["expires_at"] is not None
    assert api.call("GET", "/v1/computers", key["key"]).status_code == 200
    api.clock.advance(59)
    assert api.call("GET", "/v1/computers", key["key"]).status_code == 200
    api.clock.advance(1)
    r = api.call("GET", "/v1/computers", key["key"])
    assert error(r) == (401, "unauthorized") and "expired" in r.json()["error"]["message"]
    for bad in (
        {"expires_in": 0},
        {"expires_at": "2001-01-01T00:00:00Z"},
        {"expires_in": 60, "expires_at": "2100-01-01T00:00:00Z"},
        {"expires_at": "2100-01-01T00:00:00"},
    ):
        assert error(api.call("POST", "/v1/keys", json=bad))[0] == 422, bad


def test_an_org_admin_reaches_its_own_org_only(api: Api) -> None:
    api.new_org("acme")
    api.new_org("other")
    acme = api.new_key(org="acme", name="acme admin", admin=True)["key"]
    other_key = api.new_key(org="other", name="other user")

    assert error(api.call("POST", "/v1/orgs", acme, json={"name": "mine"})) == (403, "forbidden")
    r = api.call("POST", "/v1/keys", acme, json={"org": "other"})
    assert error(r) == (403, "forbidden")
    assert error(api.call("POST", "/v1/keys", acme, json={"host_admin": True})) == (
        403,
        "forbidden",
    )
    assert error(api.call("GET", "/v1/keys", acme, params={"org": "other"})) == (403, "forbidden")
    assert error(api.call("GET", "/v1/audit", acme, params={"org": "other"})) == (
        403,
        "forbidden",
    )
    r = api.call("DELETE", f"/v1/keys/{other_key['id']}", acme)
    assert error(r) == (404, "key_not_found")
    assert error(api.call("GET", "/v1/images", acme)) == (403, "forbidden")
    assert api.call("GET", "/v1/computers", other_key["key"]).status_code == 200  # not revoked

    mine = api.new_key(acme, name="acme ci")  # its own org, by default
    assert (mine["org"], mine["admin"], mine["host_admin"]) == ("acme", False, False)
    assert {k["org"] for k in api.call("GET", "/v1/keys", acme).json()["keys"]} == {"acme"}
    assert [o["name"] for o in api.call("GET", "/v1/orgs", acme).json()["orgs"]] == ["acme"]
    assert api.call("DELETE", f"/v1/keys/{mine['id']}", acme).status_code == 200
    assert {r["org"] for r in api.audit(acme)} == {"acme"}

    # the host admin reaches every org
    assert {k["org"] for k in api.call("GET", "/v1/keys").json()["keys"]} == {
        "default",
        "acme",
        "other",
    }
    only = api.call("GET", "/v1/keys", params={"org": "other"}).json()["keys"]
    assert [k["id"] for k in only] == [other_key["id"]]
    assert api.new_key(org="other", admin=True)["org"] == "other"
    assert {"acme", "default"} <= {r["org"] for r in api.audit()}
    assert {r["org"] for r in api.audit(org="acme")} == {"acme"}


def test_the_last_host_admin_key_stays_and_only_a_host_admin_revokes_one(api: Api) -> None:
    keys = api.call("GET", "/v1/keys").json()["keys"]
    (root,) = [k for k in keys if k["host_admin"]]
    default_admin = api.new_key(name="an admin of default", admin=True)["key"]
    r = api.call("DELETE", f"/v1/keys/{root['id']}", default_admin)
    assert error(r) == (403, "forbidden")
    r = api.call("DELETE", f"/v1/keys/{root['id']}")
    assert error(r) == (409, "last_host_admin_key")
    second = api.new_key(name="second root", host_admin=True)
    assert second["admin"] and second["host_admin"]
    api.new_org("made-by-second")
    assert api.call("POST", "/v1/orgs", second["key"], json={"name": "two"}).status_code == 201
    assert api.call("DELETE", f"/v1/keys/{root['id']}", second["key"]).status_code == 200
    assert error(api.call("GET", "/v1/computers")) == (401, "unauthorized")


def test_a_burst_of_wrong_keys_is_refused_until_the_window_passes(api: Api) -> None:
    for _ in range(50):  # successes are not counted
        assert api.call("GET", "/v1/computers").status_code == 200
    for i in range(20):
        r = api.call("GET", "/v1/computers", f"sbk_guess{i}")
        assert error(r) == (401, "unauthorized")
        api.clock.advance(1)
    r = api.call("GET", "/v1/computers", "sbk_guess21")
    assert error(r) == (429, "too_many_failures") and r.headers["retry-after"] == "40"
    assert error(api.client.get("/v1/computers")) == (429, "too_many_failures")  # no key either
    r = api.call("POST", "/v1/computers/x/stop", "sbk_guess22")
    assert error(r) == (429, "too_many_failures")
    api.clock.advance(41)  # past the oldest failure: refused ones counted too, so still refused
    assert error(api.call("GET", "/v1/computers", "sbk_guess23")) == (429, "too_many_failures")
    api.clock.advance(60)  # quiet for a window: the address may try again
    assert error(api.call("GET", "/v1/computers", "sbk_guess24")) == (401, "unauthorized")
    refused = [r for r in api.audit() if r["status"] == 429][-1]  # recorded, with no actor
    assert (refused["action"], refused["status"], refused["key_prefix"], refused["client"]) == (
        "POST /v1/computers/{ref}/stop",
        429,
        None,
        CLIENT[0],
    )


def test_failures_from_an_address_never_lock_out_a_right_key(api: Api) -> None:
    """Anyone can fail from an address (a shared NAT, or to lock a tenant out): a right key still
    opens, from that address and any other, while wrong ones stay refused."""
    user = api.new_key(name="user")["key"]
    for i in range(40):
        api.call("GET", "/v1/computers", f"sbk_flood{i}")
    assert error(api.call("GET", "/v1/computers", "sbk_flood")) == (429, "too_many_failures")
    assert api.call("GET", "/v1/computers").status_code == 200  # same address, right key
    assert api.call("GET", "/v1/computers", user).status_code == 200
    assert api.call("POST", "/v1/computers/x/stop", user).status_code == 404  # not 429
    with api.client.websocket_connect("/v1/computers/x/exec/stream", headers=api.h(user)) as ws:
        ws.send_text(json.dumps({"type": "start", "cmd": ["true"]}))
        answer = json.loads(ws.receive_text())
    assert answer["code"] == "computer_not_found"  # authenticated, then the computer looked up
    other = TestClient(api.client.app, client=("198.51.100.9", 40000))
    assert other.get("/v1/computers", headers=api.h(user)).status_code == 200
    r = other.get("/v1/computers", headers=api.h("sbk_other_guess"))
    assert error(r) == (401, "unauthorized")  # another address: its own count


def test_every_mutation_is_audited_failed_ones_too_and_never_a_key(api: Api) -> None:
    user = api.new_key(name="user")
    api.call("POST", "/v1/computers/nope/stop")  # 404
    api.client.post("/v1/computers/nope/stop")  # 401: no key
    api.call("POST", "/v1/computers/nope/stop", "sbk_wrong_secret_guess")  # 401: a wrong key
    api.call("POST", "/v1/orgs", user["key"], json={"name": "x"})  # 403
    api.call("POST", f"/v1/computers/{user['key']}/stop", user["key"])  # a key in the path
    api.client.post("/v1/computers/nope/start", params={"token": user["key"]})  # in the query
    api.call("DELETE", f"/v1/keys/{user['id']}")
    api.call("POST", "/v1/computers/nope/restart", user["key"])  # a revoked key: 401
    api.call("GET", "/v1/computers")  # reads are not recorded
    with api.client.websocket_connect("/v1/computers/nope/exec/stream", headers=api.h()) as ws:
        ws.send_text(json.dumps({"cmd": ["true"]}))
        ws.receive_text()

    records = api.audit()
    root_prefix = api.root_key[:12]

    def outcome(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["key_prefix"], r["org"], r["action"], r["target"], r["status"], r["code"]

    seen = [outcome(r) for r in records]
    assert seen == [
        (root_prefix, "default", "POST /v1/keys", {}, 201, None),
        (
            root_prefix,
            "default",
            "POST /v1/computers/{ref}/stop",
            {"ref": "nope"},
            404,
            "computer_not_found",
        ),
        (None, None, "POST /v1/computers/{ref}/stop", {"ref": "nope"}, 401, "unauthorized"),
        (None, None, "POST /v1/computers/{ref}/stop", {"ref": "nope"}, 401, "unauthorized"),
        (user["prefix"], "default", "POST /v1/orgs", {}, 403, "forbidden"),
        (
            user["prefix"],
            "default",
            "POST /v1/computers/{ref}/stop",
            {"ref": "sbk_[redacted]"},
            404,
            "computer_not_found",
        ),
        (None, None, "POST /v1/computers/{ref}/start", {"ref": "nope"}, 401, "unauthorized"),
        (root_prefix, "default", "DELETE /v1/keys/{key_id}", {"key_id": user["id"]}, 200, None),
        (
            user["prefix"],
            "default",
            "POST /v1/computers/{ref}/restart",
            {"ref": "nope"},
            401,
            "unauthorized",
        ),
        (
            root_prefix,
            "default",
            "WEBSOCKET /v1/computers/{ref}/exec/stream",
            {"ref": "nope"},
            101,
            "computer_not_found",
        ),
    ]
    assert {r["client"] for r in records} == {CLIENT[0]}
    assert all(
        r["time"] and r["key_id"] in (None, user["id"], records[0]["key_id"]) for r in records
    )
    text = api.call("GET", "/v1/audit").text
    for secret in (api.root_key, user["key"], "sbk_wrong_secret_guess"):
        assert secret not in text
    after = api.audit(after=records[7]["id"], limit=1)
    assert [r["id"] for r in after] == [records[8]["id"]]
    assert [r["id"] for r in api.audit(limit=2)] == [r["id"] for r in records[-2:]]


def test_events_name_the_key_whose_request_caused_them(api: Api) -> None:
    user = api.new_key(name="maker")
    r = api.call("POST", "/v1/computers", user["key"], json={"name": "made"})
    assert r.status_code == 201, r.text
    try:
        events = api.call("GET", "/v1/computers/made/events").json()["events"]
        assert [(e["type"], e["actor"]) for e in events[:2]] == [
            ("computer.creating", user["prefix"]),
            ("computer.running", user["prefix"]),
        ]
        api.call("POST", "/v1/computers/made/stop")
        last = api.call("GET", "/v1/computers/made/events").json()["events"][-1]
        assert (last["type"], last["actor"]) == ("computer.stopped", api.root_key[:12])
    finally:
        assert api.call("DELETE", "/v1/computers/made").status_code == 200


def test_a_flood_of_anonymous_records_cannot_push_out_the_others(short_tmp: Path) -> None:
    db = Database(f"sqlite:///{short_tmp / 'audit.db'}")
    db.migrate()
    log = AuditLog(db, keep_anonymous=5, prune_every=1)
    log.record(AuditEntry("POST /v1/keys", 201, key_id="key_1", key_prefix="sbk_x", org_id="o"))
    for _ in range(50):
        log.record(AuditEntry("POST /v1/computers", 401, code="unauthorized", client="10.0.0.1"))
    log.record(AuditEntry("POST /v1/orgs", 201, key_id="key_1", key_prefix="sbk_x", org_id="o"))
    with db.session() as s:
        kept = s.execute(select(AuditRow.key_id, func.count()).group_by(AuditRow.key_id)).all()
    assert dict(kept) == {None: 5, "key_1": 2}
    db.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


def _within(seconds: float, work: Callable[[], T]) -> T:
    """`work`'s result, run in a thread, or a failure if it has not ended within `seconds`."""
    done: list[T] = []
    runner = threading.Thread(target=lambda: done.append(work()), daemon=True)
    runner.start()
    runner.join(seconds)
    assert done, f"still running after {seconds} s"
    return done[0]


def test_a_live_connection_ends_when_its_key_stops(
    api: Api, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A shell, an event feed or a followed log opened before its key was revoked or expired
    ends within a re-check (they went on for as long as they were left open)."""
    monkeypatch.setattr(standing, "RECHECK", 0.1)
    made = api.new_key(name="live")
    key = made["key"]
    assert api.call("POST", "/v1/computers", key, json={"name": "x"}).status_code == 201
    with api.client.websocket_connect("/v1/computers/x/exec/stream", headers=api.h(key)) as ws:
        ws.send_text(json.dumps({"type": "start", "cmd": ["cat"]}))
        ws.send_text(json.dumps({"type": "stdin", "data": base64.b64encode(b"hi").decode()}))
        echoed = json.loads(ws.receive_text())
        assert (echoed["type"], base64.b64decode(echoed["data"])) == ("stdout", b"hi")

        with api.client.stream("GET", "/v1/events", headers=api.h(key)) as feed:
            assert feed.status_code == 200
            api.call("DELETE", f"/v1/keys/{made['id']}")
            said = _within(10, lambda: json.loads(ws.receive_text()))
            assert said["type"] == "error" and said["code"] == "unauthorized", said
            _within(10, lambda: list(feed.iter_bytes()))  # the feed ends too

    # a terminal's program ends with it (the PTY's stream was left open, its shell running)
    pid_file = tmp_path / "pty.pid"
    other = api.new_key(name="pty")
    with api.client.websocket_connect(
        "/v1/computers/x/exec/stream", headers=api.h(other["key"])
    ) as ws:
        shell = f"echo $$ > {pid_file}; exec sleep 1000"
        ws.send_text(json.dumps({"type": "start", "cmd": ["sh", "-c", shell], "pty": True}))
        deadline = time.monotonic() + 10
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline, "the terminal's program did not start"
            time.sleep(0.05)
        pid = int(pid_file.read_text())
        api.call("DELETE", f"/v1/keys/{other['id']}")
        said = _within(10, lambda: json.loads(ws.receive_text()))
        assert said["code"] == "unauthorized", said
    deadline = time.monotonic() + 10
    while _alive(pid):
        assert time.monotonic() < deadline, "the terminal's program outlived its key"
        time.sleep(0.05)

    short = api.new_key(name="short", expires_in=60)
    with api.client.stream("GET", "/v1/events", headers=api.h(short["key"])) as feed:
        api.clock.advance(61)
        _within(10, lambda: list(feed.iter_bytes()))
    assert api.call("DELETE", "/v1/computers/x").status_code in (200, 202, 204)

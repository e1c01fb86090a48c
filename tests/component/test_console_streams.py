"""A followed build log in the console ends with its session: the key it was opened with revoked
mid-build, the stream closes within a re-check, though the build goes on (it kept streaming for
the rest of the build, which can take an hour)."""

from __future__ import annotations

import threading
import time

import pytest

from sanbox.fleet.operations import Operations
from sanbox.store.models import Org, TemplateRow

from .conftest import Server

pytestmark = pytest.mark.component


def test_a_followed_build_log_ends_when_its_key_is_revoked(server: Server) -> None:
    made = server.client.post("/v1/keys", json={"name": "viewer"}, headers=server.headers())
    assert made.status_code == 201, made.text
    key, key_id = made.json()["key"], made.json()["id"]
    db = server.client.app.state.db  # type: ignore[attr-defined]
    # a build that goes on: its record, and the operation a build holds (without it, the sweep
    # of builds no API node runs would end it)
    Operations(db).begin("tpl_building0001", "build")
    with db.session() as s:
        org = s.query(Org).filter_by(name="default").one()
        s.add(
            TemplateRow(
                id="tpl_building0001",
                org_id=org.id,
                name="slow",
                state="building",
                base="base",
                spec='name = "slow"\n',
                digest="0" * 64,
                vcpus=1,
                memory_mib=512,
            )
        )
    origin = {"origin": "http://testserver"}
    login = server.client.post(
        "/console/login", data={"key": key}, headers=origin, follow_redirects=False
    )
    assert login.status_code == 303, login.text
    ended = threading.Event()

    def follow() -> None:
        with server.client.stream("GET", "/console/templates/tpl_building0001/logs") as r:
            assert r.status_code == 200
            for _ in r.iter_bytes():
                pass
        ended.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert not ended.wait(1.0), "the log stream ended while the build and the session go on"
    revoked = server.client.delete(f"/v1/keys/{key_id}", headers=server.headers())
    assert revoked.status_code == 200, revoked.text
    started = time.monotonic()
    assert ended.wait(20), "the log stream outlived its session"
    assert time.monotonic() - started < 15

"""An org's bounds hold across API nodes (`fleet/node_share.py`, `fleet/api_nodes.py`): two
`sanbox server` apps over one PostgreSQL each enforce their share of a key's and an org's request
rate and of an org's open requests, so a tenant that spreads its requests over both gets its
bounds once, not once per node; once a node stops beating (it died) and its beat has expired, the
other node's next beat gives it the whole bound back. No host joins: no guest runs."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update

from sanbox.api.app import create_app
from sanbox.api.settings import ServerSettings
from sanbox.fleet import clock
from sanbox.fleet.api_nodes import LIVE_FOR, ApiNodes
from sanbox.host.data.layout import DataDir
from sanbox.host.drivers.local import LocalDriver
from sanbox.host.runtime import HostRuntime
from sanbox.store import Database, repo
from sanbox.store.fleet_models import ApiNodeRow
from tests.component.conftest import fake_image, served

from .conftest import fresh_schema, wait_for

pytestmark = pytest.mark.fleet

BURST = 10  # a key's burst (the org's: four keys' worth); the rate refills nothing meanwhile


@dataclass
class Node:
    app: FastAPI
    url: str

    @property
    def registry(self) -> ApiNodes:
        nodes: ApiNodes = self.app.state.api_nodes
        return nodes

    def get(self, key: str) -> httpx.Response:
        return httpx.get(f"{self.url}/v1/computers", headers=_h(key), timeout=30)


def _h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _settings(root: Path, url: str) -> ServerSettings:
    dd = DataDir(root)
    dd.ensure()
    fake_image(dd)
    return ServerSettings(
        data_dir=dd.root,
        database_url=url,
        client_config=None,
        watch_interval=0.2,
        key_rate=0.001,
        key_burst=BURST,
        open_requests_per_key=2,
        open_requests_per_org=4,
    )


@pytest.fixture
def pg_fresh() -> Iterator[str]:
    yield from fresh_schema()


@pytest.fixture
def nodes(pg_fresh: str, tmp_path: Path) -> Iterator[tuple[Node, Node, Database]]:
    """Two API nodes over one database, each counting the other (the first's next beat)."""
    apps = [
        create_app(s, HostRuntime(s.layout, LocalDriver(), networking=False))
        for s in (_settings(tmp_path / n, pg_fresh) for n in ("a", "b"))
    ]
    db = Database(pg_fresh)
    try:
        with served(apps[0]) as url_a, served(apps[1]) as url_b:
            a, b = Node(apps[0], url_a), Node(apps[1], url_b)
            assert a.registry.beat() == 2  # a started first: it counts b from its next beat
            assert b.registry.share.nodes == 2
            yield a, b, db
    finally:
        db.close()


def _keys(db: Database, org: str, count: int) -> list[str]:
    """`count` new keys of a new org, made in the store (no request spent on them)."""
    with db.session() as s:
        made = repo.create_org(s, org)
        return [repo.create_key(s, made, f"k{i}")[1] for i in range(count)]


def _served(responses: list[httpx.Response]) -> int:
    refused = [r for r in responses if r.status_code != 200]
    assert all(r.json()["error"]["code"] == "rate_limited" for r in refused)
    return len(responses) - len(refused)


def test_a_key_and_an_org_get_their_rate_once_across_the_nodes(
    nodes: tuple[Node, Node, Database],
) -> None:
    a, b, db = nodes
    (key,) = _keys(db, "one-key", 1)
    spread = [node.get(key) for node in itertools.islice(itertools.cycle((a, b)), 3 * BURST)]
    assert _served(spread) == BURST  # half the burst on each node, not a burst on each
    refused = spread[-1].json()["error"]["message"]
    assert "shared by 2 API nodes" in refused and "this API key" in refused
    # eight keys, each within its own share on each node: the org's burst is what holds them
    keys = _keys(db, "many-keys", 8)
    asked = [node.get(k) for k in keys for node in (a, b) for _ in range(BURST // 2)]
    assert _served(asked) == 4 * BURST  # the org's burst (four keys' worth), across both
    assert "this org" in asked[-1].json()["error"]["message"]


@contextlib.contextmanager
def _stream(node: Node, key: str) -> Iterator[httpx.Response]:
    """`GET /v1/events` on the node, held open for the block (its answer's head read)."""
    with httpx.stream("GET", f"{node.url}/v1/events", headers=_h(key), timeout=30) as r:
        yield r


def _open(held: contextlib.ExitStack, node: Node, key: str) -> int:
    """Open a stream on the node and hold it; its status (a refusal's code checked)."""
    r = held.enter_context(_stream(node, key))
    if r.status_code != 200:
        r.read()
        assert r.json()["error"]["code"] == "too_many_open_requests", r.text
    return r.status_code


def _stop_beating(node: Node) -> None:
    """The node's beats stop, as if it died (its row stays, its beat ages)."""
    task = node.registry.task
    assert task is not None
    task.get_loop().call_soon_threadsafe(task.cancel)
    wait_for(task.done)


def _expire(db: Database, node: Node) -> None:
    """Its last beat was longer ago than `LIVE_FOR` (time passed, without waiting for it)."""
    t = ApiNodeRow.__table__.c
    with db.engine.begin() as conn:
        conn.execute(
            update(ApiNodeRow)
            .where(t.name == node.registry.name)
            .values(beat_at=clock.at(conn.dialect, -2 * LIVE_FOR))
        )


def _counted_out(db: Database, dead: Node, by: Node) -> bool:
    """`dead`'s beat expired, then `by`'s next beat: whether it counts `dead` out (a beat of
    `dead` still in flight when it stopped may land after the expiry: then not yet)."""
    _expire(db, dead)
    return by.registry.beat() == 1


def test_an_orgs_open_requests_hold_across_the_nodes_and_a_dead_nodes_share_returns(
    nodes: tuple[Node, Node, Database],
) -> None:
    a, b, db = nodes
    k1, k2, k3 = _keys(db, "streams", 3)
    with contextlib.ExitStack() as held:
        for key in (k1, k2):  # one stream each per node: the org's 4, two on each
            assert _open(held, a, key) == 200
            assert _open(held, b, key) == 200
        assert _open(held, a, k1) == 429  # the key's share on a (2 over 2 nodes)
        for node in (a, b):  # the org's share on each: k3 opens nothing on either
            assert _open(held, node, k3) == 429
        _stop_beating(b)
        wait_for(lambda: _counted_out(db, b, by=a))
        assert _open(held, a, k3) == 200  # a holds the whole bound now: the org's 4
        assert _open(held, a, k1) == 200  # ... and the key's 2
        assert _open(held, a, k2) == 429  # never more than the whole bound

"""A server that restarts drops what a crash left of snapshots: a record still `creating` (its
caller was never answered), a snapshot folder without a record, a half-written temporary folder,
and (through the layer collect) the layers only those stood on. A finished snapshot stays and
still makes computers."""

from __future__ import annotations

from pathlib import Path

import pytest

from sanbox.fleet.operations import Operations
from sanbox.store.models import SnapshotRow

from .conftest import Server, start_server
from .test_api_computers import create

pytestmark = pytest.mark.component


def test_restart_drops_unfinished_snapshots_and_keeps_finished_ones(
    server: Server, short_tmp: Path
) -> None:
    h = server.headers()
    src = create(server, name="src")
    assert server.client.post("/v1/computers/src/stop", headers=h).status_code == 200
    kept = server.client.post("/v1/computers/src/snapshots", json={"name": "kept"}, headers=h)
    assert kept.status_code == 201, kept.text
    lost = server.client.post("/v1/computers/src/snapshots", json={"name": "lost"}, headers=h)
    assert lost.status_code == 201, lost.text
    lost_id = lost.json()["id"]
    db = server.client.app.state.db  # type: ignore[attr-defined]
    with db.session() as s:  # as if the server died between the host's work and the answer
        row = s.get(SnapshotRow, lost_id)
        assert row is not None
        row.state = "creating"
    # another API node is taking one of "busy" meanwhile: its record and its operation
    busy = create(server, name="busy")
    assert server.client.post("/v1/computers/busy/stop", headers=h).status_code == 200
    taken = server.client.post("/v1/computers/busy/snapshots", json={}, headers=h).json()["id"]
    with db.session() as s:
        row = s.get(SnapshotRow, taken)
        assert row is not None
        row.state = "creating"
    elsewhere = Operations(db).begin(str(busy["id"]), "snapshot", node="another-node:0000")
    # and another node starts "src" (not a take of its lost snapshot: that one is dropped still)
    starting = Operations(db).begin(str(src["id"]), "start", node="another-node:0000")
    snapshots = server.data_dir.snapshots
    stray = snapshots / "snp_strayfolder00000000"
    stray.mkdir()
    (stray / "manifest.json").write_text("{}")
    half = snapshots / ".tmp-snp_halfwritten000000"
    half.mkdir()
    server.client.__exit__(None, None, None)  # the server stops; the files stay

    client, _settings, dd = start_server(short_tmp)
    with client:
        report = client.app.state.reconcile_report  # type: ignore[attr-defined]
        assert report.snapshots_dropped == [lost_id]
        assert "snp_strayfolder00000000" in report.orphans
        assert taken not in report.orphans, "another node's snapshot was swept"
        listed = client.get("/v1/snapshots", headers=h).json()["snapshots"]
        assert [s["name"] for s in listed] == ["kept"]
        assert sorted(p.name for p in dd.snapshots.iterdir()) == sorted([listed[0]["id"], taken])
        with client.app.state.db.session() as s:  # type: ignore[attr-defined]
            row = s.get(SnapshotRow, taken)
            assert row is not None and row.state == "creating", "another node's take was dropped"
            s.delete(row)  # as that node would on a failed take
        for op in (elsewhere, starting):
            Operations(client.app.state.db).finish(op.op_id)  # type: ignore[attr-defined]
        events = client.get("/v1/computers/src/events", headers=h).json()["events"]
        assert any(e["type"] == "snapshot.failed" and lost_id in e["message"] for e in events)
        made = client.post(
            "/v1/computers", json={"name": "again", "from_snapshot": "kept"}, headers=h
        )
        assert made.status_code == 201, made.text
        client.delete("/v1/computers/again", headers=h)
        client.delete("/v1/computers/src", headers=h)
        client.delete("/v1/computers/busy", headers=h)

"""A template build holds an operation, by the template's id, from its `building` record (queued
too) to its end. So with several API nodes on one database, a node that starts again fails only
the builds nobody runs (its own, cut by its stop), and leaves another node's build and the layer
it is taking alone; before, it failed every org's building template and dropped the layer's
record, which the other node's build then crashed on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from sanbox.control import build_run
from sanbox.control.build_slots import FairSlots
from sanbox.fleet.operations import Operations
from sanbox.store import repo
from sanbox.store.fleet_models import BuildVmRow
from sanbox.store.models import SnapshotRow, TemplateRow, UsageRow

from .conftest import Server, start_server
from .test_api_computers import error
from .test_template_requests import SPEC_OK, context, post

pytestmark = pytest.mark.component

ELSEWHERE = "another-node:0000"


def _building_row(org_id: str, template_id: str, name: str) -> TemplateRow:
    """A template record `building`, as a build's request leaves it."""
    return TemplateRow(
        id=template_id,
        org_id=org_id,
        name=name,
        state="building",
        base="base",
        spec=SPEC_OK,
        digest="0" * 64,
        vcpus=1,
        memory_mib=512,
    )


def _their_build(server: Server) -> tuple[str, str]:
    """Another node's build of `theirs`, queued no more: its record, its operation, and a layer
    it is taking (a record `creating` and the folder its host is writing)."""
    db = server.client.app.state.db  # type: ignore[attr-defined]
    with db.session() as s:
        org = repo.org_by_name(s, "default")
        assert org is not None
        s.add(_building_row(org.id, "tpl_theirs0000000", "theirs"))
        s.add(
            SnapshotRow(
                id="snp_theirlayer000",
                org_id=org.id,
                name=None,
                state="creating",
                computer_id="cmp_theirbuild00",
                computer_name="build of theirs",
                template="theirs",
                image="0" * 16,
                vcpus=1,
                memory_mib=512,
                disk_gib=0,
                memory=False,
                size_bytes=0,
                env={},
                allow=[],
                idle_timeout=0,
                host_id=None,
            )
        )
    folder = server.data_dir.snapshots / "snp_theirlayer000"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({}))
    return "tpl_theirs0000000", Operations(db).begin(
        "tpl_theirs0000000", "build", node=ELSEWHERE
    ).op_id


def test_a_restart_fails_only_the_builds_nobody_runs(
    server: Server, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build_run, "BUILDS", FairSlots(0))  # this node's build waits, queued
    h = server.headers()
    mine = post(server, context({"sanbox.toml": SPEC_OK.encode()}), name="mine")
    assert mine.status_code == 202, mine.text  # type: ignore[attr-defined]
    mine_id = mine.json()["template"]["id"]  # type: ignore[attr-defined]
    db = server.client.app.state.db  # type: ignore[attr-defined]
    held = Operations(db).incomplete(mine_id)
    assert held is not None and held.kind == "build", "a queued build holds no operation"
    again = post(server, context({"sanbox.toml": SPEC_OK.encode()}), name="mine")
    assert error(again) == (409, "template_building")
    theirs_id, theirs_op = _their_build(server)
    server.client.__exit__(None, None, None)  # this node stops: its queued build is cut

    client, _settings, dd = start_server(short_tmp)
    with client:
        got = {t["name"]: t for t in client.get("/v1/templates", headers=h).json()["templates"]}
        assert got["theirs"]["state"] == "building", "another node's build was failed"
        assert got["mine"]["state"] == "failed"
        assert "the server stopped during the build" in got["mine"]["error"]
        report = client.app.state.reconcile_report  # type: ignore[attr-defined]
        assert "snp_theirlayer000" not in report.orphans, "another build's layer was swept"
        assert (dd.snapshots / "snp_theirlayer000").is_dir()
        db = client.app.state.db  # type: ignore[attr-defined]
        with db.session() as s:
            layer = s.get(SnapshotRow, "snp_theirlayer000")
            assert layer is not None and layer.state == "creating", "its layer's record went"
            s.delete(layer)  # as that node would on a failed take
            theirs = s.get(TemplateRow, theirs_id)
            assert theirs is not None
            theirs.state = "failed"
        Operations(db).finish(theirs_op)
        for name in ("mine", "theirs"):
            assert client.delete(f"/v1/templates/{name}", headers=h).status_code == 200


def _building(server: Server, template_id: str, name: str) -> None:
    db = server.client.app.state.db  # type: ignore[attr-defined]
    with db.session() as s:
        org = repo.org_by_name(s, "default")
        assert org is not None
        s.add(_building_row(org.id, template_id, name))
        vm = BuildVmRow(id=f"bld-{name}", org_id=org.id, template=name, node=ELSEWHERE)
        vm.vcpus, vm.memory_mib, vm.disk_gib = 1, 1024, 1
        s.add(vm)


def test_the_builds_of_a_node_that_went_are_ended_by_the_sweep(server: Server) -> None:
    """A node that stopped answering for good (its operations swept as abandoned) left a build:
    its template fails and the VM it recorded is forgotten, its usage closed, where before the
    template stayed `building` (rebuild and delete refused) and the VM was billed and held in
    the org's quota until that node came back. One another node still runs is left alone."""
    _building(server, "tpl_gone000000000", "gone")
    _building(server, "tpl_alive00000000", "alive")
    db = server.client.app.state.db  # type: ignore[attr-defined]
    op = Operations(db).begin("tpl_alive00000000", "build", node=ELSEWHERE)
    fleet = server.client.app.state.computers.fleet  # type: ignore[attr-defined]
    portal = server.client.portal
    assert portal is not None
    portal.call(build_run.end_abandoned, fleet)
    with db.session() as s:
        gone, alive = (
            s.get(TemplateRow, "tpl_gone000000000"),
            s.get(TemplateRow, "tpl_alive00000000"),
        )
        assert gone is not None and gone.state == "failed"
        assert gone.error is not None and "stopped answering" in gone.error
        assert alive is not None and alive.state == "building"
        assert s.get(BuildVmRow, "bld-gone") is None and s.get(BuildVmRow, "bld-alive") is not None
        q = select(UsageRow).where(UsageRow.computer_id == "bld-gone")
        assert [r.ended_at is not None for r in s.scalars(q)] == [True]
    Operations(db).finish(op.op_id)
    portal.call(build_run.end_abandoned, fleet)
    with db.session() as s:
        assert s.get(BuildVmRow, "bld-alive") is None

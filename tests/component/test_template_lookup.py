"""Which build of a template a request means, on a real (migrated) SQLite store: a template is
built per region, one row per region (`""`: the server's own host). A request names a region,
or gets the build in the org's home region, or the only one; a create in a region the template
is not built in is refused naming where it is and how to build it there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy.exc import IntegrityError

from sanbox.control.errors import ConflictError, NotFoundError
from sanbox.control.fleet import Fleet
from sanbox.control.template_lookup import for_create, get
from sanbox.fleet.regions import set_regions
from sanbox.store import Database, repo
from sanbox.store.models import Org, TemplateRow

pytestmark = pytest.mark.component


@dataclass
class Plane:  # what the lookup reads of the fleet: its database
    db: Database


@pytest.fixture
def plane(tmp_path: Path) -> Fleet:
    db = Database(f"sqlite:///{tmp_path / 'sanbox.db'}")
    db.migrate()
    with db.session() as s:
        repo.create_org(s, "acme")
    return cast(Fleet, Plane(db))


def _org(plane: Fleet) -> Org:
    with plane.db.session() as s:
        org = repo.org_by_name(s, "acme")
        assert org is not None
        return org


def _built(plane: Fleet, name: str, region: str) -> str:
    tid = repo.new_id("tpl_")
    with plane.db.session() as s:
        s.add(
            TemplateRow(
                id=tid,
                org_id=_org(plane).id,
                name=name,
                region=region,
                state="ready",
                base="base",
                spec="",
                digest="d",
                vcpus=1,
                memory_mib=512,
            )
        )
    return tid


def _code(call: Callable[[], object]) -> str:
    with pytest.raises((ConflictError, NotFoundError)) as raised:
        call()
    return raised.value.code


def test_a_name_means_the_only_build_or_the_home_regions(plane: Fleet) -> None:
    org = _org(plane)
    us = _built(plane, "notes", "us-1")
    assert get(plane, org, "notes").id == us
    eu = _built(plane, "notes", "eu-1")
    assert _code(lambda: get(plane, org, "notes")) == "region_required"
    assert get(plane, org, "notes", "eu-1").id == eu
    assert get(plane, org, us).id == us  # an id is one build
    set_regions(plane.db, org.id, "eu-1", ["us-1"])
    assert get(plane, org, "notes").id == eu
    assert _code(lambda: get(plane, org, "notes", "ap-1")) == "template_not_in_region"
    assert _code(lambda: get(plane, org, "other")) == "template_not_found"


def test_a_create_uses_its_regions_build_and_refuses_another(plane: Fleet) -> None:
    org = _org(plane)
    set_regions(plane.db, org.id, "eu-1", ["us-1"])
    us = _built(plane, "notes", "us-1")
    assert for_create(plane, org, "notes", "us-1").id == us
    with pytest.raises(ConflictError) as raised:
        for_create(plane, org, "notes", None)  # home: eu-1
    assert raised.value.code == "template_not_in_region"
    assert "rebuild notes --region eu-1" in raised.value.message
    # a build on the server's own host (before hosts joined) serves a create asking no region
    own = _built(plane, "notes", "")
    assert for_create(plane, org, "notes", None).id == own
    assert _code(lambda: for_create(plane, org, "notes", "ap-1")) == "template_not_in_region"


def test_one_build_per_region_of_a_name(plane: Fleet) -> None:
    _built(plane, "notes", "eu-1")
    with pytest.raises(IntegrityError):
        _built(plane, "notes", "eu-1")

"""An install made before keys had a lifecycle upgrades in place (0005 -> head, on SQLite and, with
SANBOX_TEST_PG_URL, PostgreSQL): its first
start's admin key becomes a host admin and keeps working, other orgs' admin keys manage their own
org only, old events have no actor, the audit table takes records; and the way back works."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from sanbox.control.audit import AuditEntry, AuditLog
from sanbox.control.keys import Keys
from sanbox.store import Database, repo
from sanbox.store.db import alembic_config, sqlite_url

from .conftest import clean_pg

pytestmark = pytest.mark.component

OLD_KEYS = [  # id, org, admin, the key
    ("key_root", "org_default", True, "sbk_rootrootrootrootroot"),
    ("key_user", "org_default", False, "sbk_useruseruseruseruser"),
    ("key_tenant", "org_tenant", True, "sbk_tenanttenanttenant"),
]


def _to(db: Database, revision: str, down: bool = False) -> None:
    with db.engine.begin() as conn:
        cfg = alembic_config(db.url)
        cfg.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(cfg, revision)


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        db = Database(sqlite_url(tmp_path / "old.db"))
    else:
        db = Database(clean_pg())
    yield db
    db.close()


def test_upgrade_from_0005_keeps_existing_installs_working(empty_db: Database) -> None:
    db = empty_db
    _to(db, "0005")
    with db.engine.begin() as conn:
        for org_id, name in (("org_default", "default"), ("org_tenant", "tenant")):
            conn.execute(
                text("insert into orgs values (:id, :name, '2026-01-01 00:00:00')"),
                {"id": org_id, "name": name},
            )
        for key_id, org_id, admin, plaintext in OLD_KEYS:
            conn.execute(
                text(
                    "insert into api_keys values (:id, :org, '', :prefix, :hash, :admin, "
                    "'2026-01-01 00:00:00')"
                ),
                {
                    "id": key_id,
                    "org": org_id,
                    "prefix": plaintext[:10],
                    "hash": repo.hash_key(plaintext),
                    "admin": admin,
                },
            )
        conn.execute(
            text(
                "insert into events (org_id, computer_id, type, message, data, "
                "created_at) values ('org_default', null, 'computer.created', '', "
                "'{}', '2026-01-01 00:00:00')"
            )
        )

    db.migrate()
    head = ScriptDirectory.from_config(alembic_config(db.url)).get_current_head()
    with db.engine.connect() as conn:
        assert conn.execute(text("select version_num from alembic_version")).scalar() == head
        assert conn.execute(text("select actor from events")).scalar() is None
    keys = Keys(db)
    root, user, tenant = (keys.authenticate(k[3], "127.0.0.1") for k in OLD_KEYS)
    assert (root.admin, root.host_admin) == (True, True)
    assert (user.admin, user.host_admin) == (False, False)
    assert (tenant.admin, tenant.host_admin) == (True, False)
    assert root.key.expires_at is None and root.key.revoked_at is None
    assert {o.name for o in keys.list_orgs(root)} == {"default", "tenant"}
    assert [o.name for o in keys.list_orgs(tenant)] == ["tenant"]
    AuditLog(db).record(AuditEntry("POST /v1/keys", 201, key_id="key_root", org_id="org_default"))
    assert [r.row.action for r in AuditLog(db).list(root)] == ["POST /v1/keys"]

    _to(db, "0005", down=True)
    schema = inspect(db.engine)
    assert "host_admin" not in {c["name"] for c in schema.get_columns("api_keys")}
    assert "audit" not in schema.get_table_names()
    db.migrate()


def test_the_migrations_make_the_tables_the_models_describe(empty_db: Database) -> None:
    """Head of the migrations == the models: a column added to one and not the other is caught
    here, not by an install that upgrades."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from sanbox.store.models import Base

    _to(empty_db, "head")
    with empty_db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert [d for d in diff if not _benign(d)] == []


def _benign(d: object) -> bool:
    """Differences that are only how a dialect reports a type back (JSON as TEXT on SQLite)."""
    return isinstance(d, list) and all(step[0] == "modify_type" for step in d)


def test_hosts_count_reservations_from_their_records(empty_db: Database) -> None:
    """0022: what a host counted before reservations had records (a share a dead node leaked
    among it) starts again from zero; the records count from there."""
    db = empty_db
    _to(db, "0021")
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "insert into hosts (id, name, region, labels, hypervisor, accel, address, vcpus,"
                " memory_mib, disk_bytes, alloc_vcpus, alloc_memory_mib, alloc_disk_bytes,"
                " layers, epoch, state, lease_until, registered_at) values ('hst_1', 'h1',"
                " 'eu-1', '{}', 'qemu', 'kvm', 'https://h1:7443', 8, 16384, 1000, 4, 2048, 10,"
                " '[]', 1, 'up', '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
            )
        )
    _to(db, "0022")
    with db.engine.connect() as conn:
        alloc = conn.execute(
            text("select alloc_vcpus, alloc_memory_mib, alloc_disk_bytes from hosts")
        ).one()
    assert tuple(alloc) == (0, 0, 0)
    _to(db, "0023")  # a host that joined before: its certificate names its address only
    with db.engine.connect() as conn:
        assert conn.execute(text("select identity_bound from hosts")).scalar_one() in (0, False)


def test_build_vms_gain_their_sizes_and_may_be_the_servers_own(empty_db: Database) -> None:
    """0027: a fleet host's build VM recorded before has no size until it ends; the server's
    own build VMs are recorded too (no host), and the way back drops those (0026 had no place
    for them)."""
    db = empty_db
    _to(db, "0026")
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "insert into orgs (id, name, created_at)"
                " values ('org_a', 'a', '2026-01-01 00:00:00')"
            )
        )
        conn.execute(
            text(
                "insert into build_vms (id, org_id, template, host_id, node, created_at) values"
                " ('bld-far', 'org_a', 't', 'hst_1', 'n1', '2026-01-01 00:00:00')"
            )
        )
    _to(db, "0027")
    with db.engine.begin() as conn:
        sizes = conn.execute(text("select vcpus, memory_mib, disk_gib from build_vms")).one()
        assert tuple(sizes) == (0, 0, 0)
        conn.execute(
            text(
                "insert into build_vms (id, org_id, template, host_id, node, created_at, vcpus,"
                " memory_mib, disk_gib) values ('bld-here', 'org_a', 't', null, 'n1',"
                " '2026-01-01 00:00:00', 2, 1024, 8)"
            )
        )
    _to(db, "0026", down=True)
    with db.engine.connect() as conn:
        assert conn.execute(text("select id from build_vms")).scalars().all() == ["bld-far"]

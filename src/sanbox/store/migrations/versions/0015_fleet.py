"""The fleet: hosts with a lease on the database clock, an epoch and their capacity and
allocation; operations with at most one incomplete per computer (a partial unique index);
computers gain the host that holds them, their region and a placement generation; orgs gain a
home region and the other regions they may use. All nullable or defaulted: one host on SQLite
runs as before.

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")  # SQLite numbers INTEGER keys only
_INCOMPLETE = sa.text("finished_at IS NULL")


def upgrade() -> None:
    op.create_table(
        "hosts",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(63), nullable=False, unique=True),
        sa.Column("region", sa.String(32), nullable=False, index=True),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("hypervisor", sa.String(32), nullable=False),
        sa.Column("accel", sa.String(16), nullable=False),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("vcpus", sa.Integer, nullable=False),
        sa.Column("memory_mib", sa.BigInteger, nullable=False),
        sa.Column("disk_bytes", sa.BigInteger, nullable=False),
        sa.Column("alloc_vcpus", sa.Integer, nullable=False, server_default="0"),
        sa.Column("alloc_memory_mib", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("alloc_disk_bytes", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("layers", sa.JSON, nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False, server_default="1"),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "operations",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("op_id", sa.String(32), nullable=False, unique=True),
        sa.Column("computer_id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("host_id", sa.String(32), nullable=True, index=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "operations_one_incomplete",
        "operations",
        ["computer_id"],
        unique=True,
        postgresql_where=_INCOMPLETE,
        sqlite_where=_INCOMPLETE,
    )
    with op.batch_alter_table("computers") as batch:
        batch.add_column(sa.Column("host_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("region", sa.String(32), nullable=True))
        batch.add_column(sa.Column("generation", sa.BigInteger, nullable=False, server_default="0"))
        batch.create_index("ix_computers_host_id", ["host_id"])
    op.add_column("orgs", sa.Column("home_region", sa.String(32), nullable=True))
    op.add_column("orgs", sa.Column("regions", sa.JSON, nullable=True))  # others it may use


def downgrade() -> None:
    for column in ("regions", "home_region"):  # in place: a copy of orgs breaks its references
        op.execute(f"ALTER TABLE orgs DROP COLUMN {column}")
    with op.batch_alter_table("computers") as batch:
        batch.drop_index("ix_computers_host_id")
        for column in ("generation", "region", "host_id"):
            batch.drop_column(column)
    op.drop_index("operations_one_incomplete", table_name="operations")
    op.drop_table("operations")
    op.drop_table("hosts")

"""Usage intervals: one row per computer per state and allocation, closed at every transition and
every minute while running, with measured CPU time and egress bytes; a counter that orders closed
intervals for consumers reading by cursor.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")  # SQLite numbers INTEGER keys only


def upgrade() -> None:
    op.create_table(
        "usage_intervals",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("org_id", sa.String(32), nullable=False, index=True),
        sa.Column("computer_id", sa.String(32), nullable=False, index=True),
        sa.Column("ordinal", sa.Integer, nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("template", sa.String(63), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("vcpus", sa.Integer, nullable=False),
        sa.Column("memory_mib", sa.Integer, nullable=False),
        sa.Column("disk_gib", sa.Integer, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True, index=True),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cpu_seconds", sa.Float, nullable=True),
        sa.Column("cpu_mark_usec", sa.BigInteger, nullable=True),
        sa.Column("egress_bytes", sa.BigInteger, nullable=True),
        sa.Column("egress_mark", sa.BigInteger, nullable=True),
        sa.Column("size_bytes", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("seq", sa.BigInteger, nullable=True, unique=True),
    )
    table = op.create_table(
        "usage_sequence",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("value", sa.BigInteger, nullable=False),
    )
    op.bulk_insert(table, [{"id": 1, "value": 0}])


def downgrade() -> None:
    op.drop_table("usage_sequence")
    op.drop_table("usage_intervals")

"""Initial schema: orgs, API keys, computers, events.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "orgs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(63), nullable=False, unique=True),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("org_id", sa.String(32), sa.ForeignKey("orgs.id"), nullable=False, index=True),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False, unique=True),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "computers",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("org_id", sa.String(32), sa.ForeignKey("orgs.id"), nullable=False, index=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("template", sa.String(63), nullable=False),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("vcpus", sa.Integer, nullable=False),
        sa.Column("memory_mib", sa.Integer, nullable=False),
        sa.Column("disk_gib", sa.Integer, nullable=False),
        sa.Column("env", sa.JSON, nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("hypervisor", sa.String(32), nullable=False),
        sa.Column("isolation", sa.String(32), nullable=False),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("request_hash", sa.String(64), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.UniqueConstraint("org_id", "name"),
        sa.UniqueConstraint("org_id", "idempotency_key"),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("org_id", sa.String(32), nullable=False, index=True),
        sa.Column("computer_id", sa.String(32), nullable=True, index=True),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )


def downgrade() -> None:
    for table in ("events", "computers", "api_keys", "orgs"):
        op.drop_table(table)

"""Snapshots: an org's saved disks (and memory) that outlive their computer; a computer records
the snapshot it came from.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "snapshots",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("org_id", sa.String(32), sa.ForeignKey("orgs.id"), nullable=False, index=True),
        sa.Column("name", sa.String(63), nullable=True),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("computer_id", sa.String(32), nullable=False, index=True),
        sa.Column("computer_name", sa.String(63), nullable=False),
        sa.Column("template", sa.String(63), nullable=False),
        sa.Column("image", sa.String(64), nullable=True),
        sa.Column("vcpus", sa.Integer, nullable=False),
        sa.Column("memory_mib", sa.Integer, nullable=False),
        sa.Column("disk_gib", sa.Integer, nullable=False),
        sa.Column("memory", sa.Boolean, nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("env", sa.JSON, nullable=False),
        sa.Column("allow", sa.JSON, nullable=False),
        sa.Column("idle_timeout", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("org_id", "name"),
    )
    with op.batch_alter_table("computers") as batch:
        batch.add_column(sa.Column("origin", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.drop_column("origin")
    op.drop_table("snapshots")

"""Quotas per org: what it may use at once (running computers, their vCPUs and memory, disk
allocated, snapshots). No row, or a NULL column, is no limit: nothing changes for an org without.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quotas",
        sa.Column("org_id", sa.String(32), sa.ForeignKey("orgs.id"), primary_key=True),
        sa.Column("running", sa.Integer, nullable=True),
        sa.Column("vcpus", sa.Integer, nullable=True),
        sa.Column("memory_mib", sa.Integer, nullable=True),
        sa.Column("disk_gib", sa.Integer, nullable=True),
        sa.Column("snapshots", sa.Integer, nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("quotas")

"""Templates an org builds from a spec, and the cache of their built steps.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "templates",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("org_id", sa.String(32), sa.ForeignKey("orgs.id"), nullable=False, index=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("base", sa.String(63), nullable=False),
        sa.Column("image", sa.String(64), nullable=True),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("snapshot_id", sa.String(32), nullable=True),
        sa.Column("ready_snapshot_id", sa.String(32), nullable=True),
        sa.Column("ready_reason", sa.Text, nullable=True),
        sa.Column("vcpus", sa.Integer, nullable=False),
        sa.Column("memory_mib", sa.Integer, nullable=False),
        sa.Column("disk_gib", sa.Integer, nullable=False),
        sa.Column("env", sa.JSON, nullable=False),
        sa.Column("allow", sa.JSON, nullable=False),
        sa.Column("ports", sa.JSON, nullable=False),
        sa.Column("idle_timeout", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("cached_steps", sa.Integer, nullable=False),
        sa.Column("build_seconds", sa.Float, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("org_id", "name"),
    )
    op.create_table(
        "build_steps",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("org_id", sa.String(32), sa.ForeignKey("orgs.id"), nullable=False, index=True),
        sa.Column("snapshot_id", sa.String(32), nullable=False, index=True),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("build_steps")
    op.drop_table("templates")

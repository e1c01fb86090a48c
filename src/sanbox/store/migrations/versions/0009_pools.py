"""Warm pools: computers of a template kept running and unclaimed until a create takes one.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pools",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("org_id", sa.String(32), sa.ForeignKey("orgs.id"), nullable=False, index=True),
        sa.Column("template", sa.String(63), nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("org_id", "template"),
    )
    with op.batch_alter_table("computers") as batch:
        batch.add_column(sa.Column("pool", sa.String(32), nullable=True))
        batch.create_index("ix_computers_pool", ["pool"])


def downgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.drop_index("ix_computers_pool")
        batch.drop_column("pool")
    op.drop_table("pools")

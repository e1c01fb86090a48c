"""A registry of API nodes, each beating every few seconds: an org's request rate and open
requests are counted in each API process, and each node now enforces its share of them (the bound
over the nodes that beat lately), so an org spread over N nodes no longer gets N times its bounds.

Revision ID: 0028
Revises: 0027
"""

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_nodes",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("beat_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_api_nodes_beat_at", "api_nodes", ["beat_at"])


def downgrade() -> None:
    op.drop_table("api_nodes")

"""Network: each computer's egress allowlist and its published ports.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.add_column(sa.Column("allow", sa.JSON, nullable=False, server_default="[]"))
        batch.add_column(sa.Column("ports", sa.JSON, nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.drop_column("ports")
        batch.drop_column("allow")

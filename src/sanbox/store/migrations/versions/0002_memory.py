"""Pause, resume and idle suspension: idle timeout and the memory outcome on computers.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.add_column(sa.Column("idle_timeout", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("memory", sa.String(16), nullable=True))
        batch.add_column(sa.Column("memory_reason", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.drop_column("memory_reason")
        batch.drop_column("memory")
        batch.drop_column("idle_timeout")

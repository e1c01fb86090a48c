"""A snapshot's host: the fleet host that holds its files (None: the server's own host), where a
computer made from it is placed and where its delete goes.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.add_column(sa.Column("host_id", sa.String(32), nullable=True))
        batch.create_index("ix_snapshots_host_id", ["host_id"])


def downgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.drop_index("ix_snapshots_host_id")
        batch.drop_column("host_id")

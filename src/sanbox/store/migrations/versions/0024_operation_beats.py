"""An operation's last sign of life from its API node (`beat_at`): the stale sweep abandons an
operation whose node stopped beating, not one that runs long (a snapshot's move of a large disk
ran past the sweep's 15 minutes, and another node could then act on what it was moving).

Revision ID: 0024
Revises: 0023
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.add_column(sa.Column("beat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.drop_column("beat_at")

"""When a computer last came to rest (paused, suspended or stopped), written by each move there:
E2B's `endAt` of a paused sandbox is the time of its pause. Null: not at rest since (a paused one
answers when its record last changed).

Revision ID: 0034
Revises: 0033
"""

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.add_column(sa.Column("rested_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.drop_column("rested_at")

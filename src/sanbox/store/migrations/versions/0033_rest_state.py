"""The rest with memory a pause under way ends in, or a resume under way came from (`paused`,
`suspended`), written with `pausing` and `resuming`: a server restart that interrupts either ends
the computer as that rest (a suspended one still woken by its next use), not always `paused`.
Null: none begun since (read as `paused`, as before).

Revision ID: 0033
Revises: 0032
"""

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.add_column(sa.Column("rest_state", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.drop_column("rest_state")

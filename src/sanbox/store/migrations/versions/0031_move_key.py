"""The Idempotency-Key of the last move of a computer and of a snapshot (`sanbox move`,
`sanbox snapshot move`), written in the transaction that names the other host: a retry with the
same key answers where that move left it instead of moving it again. Null: never moved with one.

Revision ID: 0031
Revises: 0030
"""

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("computers", "snapshots"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("move_key", sa.String(200), nullable=True))


def downgrade() -> None:
    for table in ("computers", "snapshots"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("move_key")

"""The lifetime a computer whose lifetime suspends it (E2B's auto-resume) gets from each wake
after that end: the timeout its E2B create gave, as E2B gives an auto-resumed sandbox. Null: a
computer made before, or not through E2B's API (it gets as long as its last run had).

Revision ID: 0029
Revises: 0028
"""

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.add_column(sa.Column("wake_lifetime", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.drop_column("wake_lifetime")

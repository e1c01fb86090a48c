"""A computer's E2B metadata: string pairs kept as E2B's SDK gave them (any keys), apart from its
labels. None: a computer made before (its E2B metadata were its labels).

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.add_column(sa.Column("e2b_metadata", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.drop_column("e2b_metadata")

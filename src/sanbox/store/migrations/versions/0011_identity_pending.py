"""A computer made as a copy (from a snapshot, a template's ready snapshot, a fork, a pool claim)
records that its own identity is still to be given, in the transaction that records it; the
record that says it runs clears it. A restart finds what a crash left in between.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.add_column(sa.Column("identity_pending", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.drop_column("identity_pending")

"""The certificate a join token's join was answered with, so that the same host asking again
with the same token and the same key (its answer lost on the way) gets that answer again, with
nothing registered or revoked. Null: a token not used yet, or used before this revision.

Revision ID: 0030
Revises: 0029
"""

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("join_tokens") as batch:
        batch.add_column(sa.Column("certificate", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("join_tokens") as batch:
        batch.drop_column("certificate")

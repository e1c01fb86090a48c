"""Each computer records the image build its disk was cloned from, so it keeps booting that
build's kernel and initramfs (which match its disk's modules and agent) after a rebuild.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.add_column(sa.Column("image", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.drop_column("image")

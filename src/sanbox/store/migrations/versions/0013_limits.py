"""Session limits per computer: an optional lifetime (stop or delete at created_at + lifetime)
and an optional maximum running time (stop at started_at + max_running). 0 is none: existing
computers get none.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.add_column(sa.Column("lifetime", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("on_lifetime", sa.String(8), nullable=False, server_default="stop")
        )
        batch.add_column(sa.Column("max_running", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        for column in ("started_at", "max_running", "on_lifetime", "lifetime"):
            batch.drop_column(column)

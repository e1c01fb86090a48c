"""An operation's API node: the server process (by its machine and data dir) that began it, so a
node that restarts closes what its previous life left incomplete at once (other nodes' are swept
when stale).

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.add_column(sa.Column("node", sa.String(64), nullable=True))
        batch.create_index("ix_operations_node", ["node"])


def downgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.drop_index("ix_operations_node")
        batch.drop_column("node")

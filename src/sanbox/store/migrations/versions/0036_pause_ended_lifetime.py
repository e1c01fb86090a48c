"""Whether E2B's pause put a computer to rest, ending its lifetime if it had one (a paused sandbox
has no timeout there), set as that pause begins and cleared when the computer runs again or is
given a lifetime: no deadline acts on it while it rests, and it comes up with a fresh lifetime.
False: its lifetime counts at rest too, as before.

Revision ID: 0036
Revises: 0035
"""

import sqlalchemy as sa
from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.add_column(
            sa.Column(
                "pause_ended_lifetime", sa.Boolean(), nullable=False, server_default=sa.false()
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("computers") as batch:
        batch.drop_column("pause_ended_lifetime")

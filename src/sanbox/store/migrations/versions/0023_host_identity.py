"""Whether a host's certificate names the host itself (`fleet.link.pki.identity_name`), so the
control plane checks that name, not the address it dials: a host that joined before had only
its addresses signed, which any other host could ask for too.

Revision ID: 0023
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(
            sa.Column("identity_bound", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("identity_bound")

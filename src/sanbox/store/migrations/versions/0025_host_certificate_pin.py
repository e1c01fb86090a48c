"""The fingerprint of the last certificate signed for a host (`fleet.link.pki.fingerprint`): the
control plane takes no other from it, so a certificate of an earlier join (a stolen key's) stops
working once the host joins again (each API node binds its link anew at its next look at the
hosts), though the CA signed it and it has not expired. Hosts
that joined before have none until they join again.

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("cert_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("cert_sha256")

"""What a host counts for a new VM's hypervisor beside its guest's RAM (`vm_overhead_mib`, from
its reports: its driver's estimate or the operator's SANBOX_VM_OVERHEAD_MIB): placement reserves
it with each VM's RAM, as the host's own admission counts it. 0: a host agent from before it said
one (it counts none).

Revision ID: 0035
Revises: 0034
"""

import sqlalchemy as sa
from alembic import op

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(
            sa.Column("vm_overhead_mib", sa.BigInteger, nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("vm_overhead_mib")

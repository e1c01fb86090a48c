"""Every VM a template build runs is recorded (the server's own host's too: `host_id` null) with
its vCPUs, memory and disk, so the org's quota counts it as a computer with compute and its usage
is metered (an interval of kind `build`). A record made before (a fleet host's build VM running
now) counts as one running VM of no size, unmetered, until it ends.

Revision ID: 0027
Revises: 0026
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

_SIZES = ("vcpus", "memory_mib", "disk_gib")


def upgrade() -> None:
    with op.batch_alter_table("build_vms") as batch:
        batch.alter_column("host_id", existing_type=sa.String(32), nullable=True)
        for name in _SIZES:
            batch.add_column(sa.Column(name, sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    op.execute("DELETE FROM build_vms WHERE host_id IS NULL")  # the server's own: no other home
    with op.batch_alter_table("build_vms") as batch:
        for name in _SIZES:
            batch.drop_column(name)
        batch.alter_column("host_id", existing_type=sa.String(32), nullable=False)

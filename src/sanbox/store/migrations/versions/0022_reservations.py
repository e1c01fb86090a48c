"""A record of each placement's reservation on a host, with the API node that holds it: a node
that died between reserving and releasing left the host's `alloc_*` counting it for ever.

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("host_id", sa.String(32), nullable=False),
        sa.Column("node", sa.String(64), nullable=True),
        sa.Column("vcpus", sa.Integer(), nullable=False),
        sa.Column("memory_mib", sa.BigInteger(), nullable=False),
        sa.Column("disk_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_reservations_host_id", "reservations", ["host_id"])
    op.create_index("ix_reservations_node", "reservations", ["node"])
    op.create_index("ix_reservations_created_at", "reservations", ["created_at"])
    # what the hosts counted before has no record to give it back by (a share leaked by a node
    # that died would stay for ever): counting starts again from the records
    op.execute("UPDATE hosts SET alloc_vcpus = 0, alloc_memory_mib = 0, alloc_disk_bytes = 0")


def downgrade() -> None:
    op.drop_table("reservations")

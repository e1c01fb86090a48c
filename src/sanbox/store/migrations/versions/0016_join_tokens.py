"""Join tokens: one-time tokens a host-admin makes for a host to join the fleet (only their
SHA-256 is kept), each for one region, until it expires or is used.

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "join_tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("region", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("host_name", sa.String(63), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("join_tokens")

"""Console sessions and login links in the database (they lived in each server's memory): every
API node knows every session, and a restart logs no one out.

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created", sa.Float(), nullable=False),
        sa.Column("seen", sa.Float(), nullable=False),
    )
    op.create_index("ix_console_sessions_key_id", "console_sessions", ["key_id"])
    op.create_index("ix_console_sessions_seen", "console_sessions", ["seen"])
    op.create_table(
        "login_links",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("ends", sa.Float(), nullable=False),
    )
    op.create_index("ix_login_links_ends", "login_links", ["ends"])


def downgrade() -> None:
    op.drop_table("login_links")
    op.drop_table("console_sessions")

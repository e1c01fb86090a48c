"""Finished operations are swept after a retention (`control/retention.py FinishedOperations`):
an index on `finished_at` lets each batch find the oldest finished rows without reading the
table.

Revision ID: 0032
Revises: 0031
"""

from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_operations_finished_at", "operations", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_operations_finished_at", table_name="operations")

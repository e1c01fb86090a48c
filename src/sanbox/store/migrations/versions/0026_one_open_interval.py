"""At most one open usage interval a computer or snapshot (`ended_at IS NULL`), a partial
unique index: the guard across API nodes. Before it, on PostgreSQL, a transition that waited
for the meter's cut of the same interval found it closed, did not see its continuation, and
opened a second one, which was then cut as running forever (control/usage/ledger.py's
`open_interval` now looks again). Such extra open intervals are closed here first, where they
were last seen to hold, the newest of each kept open, each given its place in the cursor.

Revision ID: 0026
Revises: 0025
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

_OPEN = sa.text("ended_at IS NULL")


def upgrade() -> None:
    conn = op.get_bind()
    intervals = sa.table(
        "usage_intervals",
        sa.column("id", sa.BigInteger),
        sa.column("computer_id", sa.String),
        sa.column("ended_at", sa.DateTime),
        sa.column("checked_at", sa.DateTime),
        sa.column("seq", sa.BigInteger),
    )
    counter = sa.table("usage_sequence", sa.column("id", sa.Integer), sa.column("value"))
    i = intervals.c
    newest = (
        sa.select(i.computer_id, sa.func.max(i.id).label("keep"))
        .where(i.ended_at.is_(None))
        .group_by(i.computer_id)
        .having(sa.func.count() > 1)
        .subquery()
    )
    extra = conn.execute(
        sa.select(i.id, i.checked_at)
        .join(newest, newest.c.computer_id == i.computer_id)
        .where(i.ended_at.is_(None), i.id != newest.c.keep)
        .order_by(i.id)
    ).all()
    for interval_id, checked_at in extra:
        value = conn.execute(sa.select(counter.c.value).where(counter.c.id == 1)).scalar_one()
        conn.execute(sa.update(counter).where(counter.c.id == 1).values(value=value + 1))
        conn.execute(
            sa.update(intervals)
            .where(i.id == interval_id)
            .values(ended_at=checked_at, seq=value + 1)
        )
    op.create_index(
        "usage_intervals_one_open",
        "usage_intervals",
        ["computer_id"],
        unique=True,
        postgresql_where=_OPEN,
        sqlite_where=_OPEN,
    )


def downgrade() -> None:
    op.drop_index("usage_intervals_one_open", table_name="usage_intervals")

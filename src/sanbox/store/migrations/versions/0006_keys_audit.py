"""Keys and audit: keys get a host-admin flag, an expiry, a revocation time and a last use;
events say which key's request caused them; an audit table records every request that meant to
change something.

Existing installs keep working: the admin keys of the org the first start made (`default`) become
host admins, as the first start's key now is. Admin keys of other orgs manage their own org only.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
BOOTSTRAP_ORG = "default"


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(
            sa.Column("host_admin", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("expires_at", TS, nullable=True))
        batch.add_column(sa.Column("revoked_at", TS, nullable=True))
        batch.add_column(sa.Column("last_used_at", TS, nullable=True))
    orgs = sa.table("orgs", sa.column("id", sa.String), sa.column("name", sa.String))
    keys = sa.table(
        "api_keys",
        sa.column("org_id", sa.String),
        sa.column("admin", sa.Boolean),
        sa.column("host_admin", sa.Boolean),
    )
    bootstrap_org = sa.select(orgs.c.id).where(orgs.c.name == BOOTSTRAP_ORG)
    op.execute(
        keys.update()
        .where(keys.c.admin == sa.true(), keys.c.org_id.in_(bootstrap_org))
        .values(host_admin=True)
    )
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("actor", sa.String(16), nullable=True))
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("org_id", sa.String(32), nullable=True, index=True),
        sa.Column("key_id", sa.String(32), nullable=True, index=True),
        sa.Column("key_prefix", sa.String(16), nullable=True),
        sa.Column("action", sa.String(200), nullable=False),
        sa.Column("target", sa.JSON, nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("code", sa.String(64), nullable=True),
        sa.Column("client", sa.String(64), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("audit")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("actor")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("last_used_at")
        batch.drop_column("revoked_at")
        batch.drop_column("expires_at")
        batch.drop_column("host_admin")

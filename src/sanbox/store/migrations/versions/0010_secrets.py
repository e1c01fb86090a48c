"""Secrets (sealed at rest), their bindings to computers, each org's egress CA, and the secrets
a template binds to its computers.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("org_id", sa.String(32), sa.ForeignKey("orgs.id"), nullable=False, index=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("hosts", sa.JSON, nullable=False),
        sa.Column("header", sa.String(200), nullable=True),
        sa.Column("placeholder_only", sa.Boolean, nullable=False),
        sa.Column("sealed", sa.LargeBinary, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("org_id", "name"),
    )
    op.create_table(
        "secret_bindings",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "secret_id", sa.String(32), sa.ForeignKey("secrets.id"), nullable=False, index=True
        ),
        sa.Column("computer_id", sa.String(32), nullable=False, index=True),
        sa.Column("env", sa.String(128), nullable=True),
        sa.Column("placeholder", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("secret_id", "computer_id"),
    )
    op.create_table(
        "org_cas",
        sa.Column("org_id", sa.String(32), sa.ForeignKey("orgs.id"), primary_key=True),
        sa.Column("cert_pem", sa.Text, nullable=False),
        sa.Column("key_sealed", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("templates") as batch:
        batch.add_column(sa.Column("secrets", sa.JSON, nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("templates") as batch:
        batch.drop_column("secrets")
    op.drop_table("org_cas")
    op.drop_table("secret_bindings")
    op.drop_table("secrets")

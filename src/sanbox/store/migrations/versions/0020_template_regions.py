"""Templates built per region: a template's row names its region ("": the server's own host),
and the same name may be built in another region (another row); the VMs a build runs on fleet
hosts are recorded while they run.

Revision ID: 0020
Revises: 0019
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# SQLite's reflected unique constraint has no name: batch mode names it by this convention
NAMES = {"uq": "uq_%(table_name)s_%(column_0_name)s"}


def _old_unique() -> str:
    """The name of the (org_id, name) unique constraint 0008 made without naming it."""
    found = sa.inspect(op.get_bind()).get_unique_constraints("templates")
    for constraint in found:
        if constraint["column_names"] == ["org_id", "name"] and constraint["name"]:
            return str(constraint["name"])
    return "uq_templates_org_id"


def upgrade() -> None:
    old = _old_unique()
    with op.batch_alter_table("templates", naming_convention=NAMES) as batch:
        batch.add_column(sa.Column("region", sa.String(32), nullable=False, server_default=""))
        batch.drop_constraint(old, type_="unique")
        batch.create_unique_constraint("uq_templates_region", ["org_id", "name", "region"])
    op.create_table(
        "build_vms",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("org_id", sa.String(32), sa.ForeignKey("orgs.id"), nullable=False),
        sa.Column("template", sa.String(63), nullable=False),
        sa.Column("host_id", sa.String(32), nullable=False),
        sa.Column("node", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    for column in ("org_id", "host_id", "node"):
        op.create_index(f"ix_build_vms_{column}", "build_vms", [column])


def downgrade() -> None:
    op.drop_table("build_vms")
    with op.batch_alter_table("templates", naming_convention=NAMES) as batch:
        batch.drop_constraint("uq_templates_region", type_="unique")
        batch.create_unique_constraint("uq_templates_org_id", ["org_id", "name"])
        batch.drop_column("region")

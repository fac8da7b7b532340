"""A job may run in a rental's own workspace (issue 26, item 6: ``danlu run --workspace ID``)

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07 11:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("workspace_instance_id", sa.String(32), nullable=True))
        batch.create_index("ix_jobs_workspace_instance_id", ["workspace_instance_id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_workspace_instance_id")
        batch.drop_column("workspace_instance_id")

"""A stopped workspace is measured after the stop commits (issue 27)

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07 06:00:00

The stop's write transaction walked the renter's files where storage is priced (on SQLite that lock is every
writer's). Now the stop records ``storage_measure_from_ms``; the loop's ``storage`` phase measures the workspace
outside any transaction and opens the storage allocation back-dated to that moment.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("storage_measure_from_ms", sa.BigInteger, nullable=True))
        batch.create_index("ix_instances_storage_measure_from_ms", ["storage_measure_from_ms"])


def downgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.drop_index("ix_instances_storage_measure_from_ms")
        batch.drop_column("storage_measure_from_ms")

"""A snapshot is billed per GB-month while it is kept (issue 26, item 4): its storage allocation

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.add_column(sa.Column("allocation_id", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.drop_column("allocation_id")

"""An elastic job declares a range of GPU counts (issue 30, item 2: ``danlu run --gpus 2-8``)

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("gpus_max", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("resize_to", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("resize_to")
        batch.drop_column("gpus_max")

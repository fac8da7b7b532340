"""GPUs the cluster's own jobs hold (Slurm backend)

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 19:00:00

``gpus.held_by_cluster``: a GPU that a job danlu did not start (another Slurm user's) holds now, as
the backend's last reconciliation saw it; it is neither offered nor claimed until it is free again
(danlu.compute.reconcile.sync_held_elsewhere, docs/slurm.md).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gpus") as t:
        t.add_column(sa.Column("held_by_cluster", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("gpus") as t:
        t.drop_column("held_by_cluster")

"""leases: who runs the control loop

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 11:30:00

The control loop's work (reconciling runs, metering, scheduling) is leased: a row per kind of
work names the server holding it, with a random token and an expiry, taken and renewed by a
guarded UPDATE, so two servers on one database never both act (danlu.server.lease).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=256), nullable=False),
        sa.Column("token", sa.String(length=64), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("leases")

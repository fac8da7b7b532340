"""A webhook's previous secret while a rotation overlaps (issue 28)

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06 21:40:00

``POST /webhooks/{id}/rotate-secret`` makes a new secret; the old one keeps signing beside it (a second
``v1,`` signature in ``webhook-signature``, as Standard Webhooks allows) until ``previous_until_ms``, so a
receiver can switch without missing a delivery.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhooks") as batch:
        batch.add_column(sa.Column("previous_secret", sa.String(64), nullable=True))
        batch.add_column(sa.Column("previous_until_ms", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("webhooks") as batch:
        batch.drop_column("previous_until_ms")
        batch.drop_column("previous_secret")

"""Snapshots of stopped workspaces (issue 26, item 4)

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 21:10:00

A snapshot is a restic snapshot in its billing account's repository (deduplicated, encrypted with a
key the platform keeps per account, danlu.compute.snapshots); this row is its record: whose, of which
instance, restic's id, and the sizes a renter is shown.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "snapshots",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("billing_account_id", sa.Integer, sa.ForeignKey("billing_accounts.id"), nullable=False),
        sa.Column("instance_id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("restic_id", sa.String(64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("added_bytes", sa.BigInteger, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_snapshots_user_id", "snapshots", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_snapshots_user_id", table_name="snapshots")
    op.drop_table("snapshots")

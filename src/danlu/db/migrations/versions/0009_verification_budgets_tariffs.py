"""student verification, budgets, live tariff rules, stored workspaces

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 14:30:00

New tables only (money tables got their owner in 0008): verifications (the student discount),
budgets (soft limits and hard caps per account, member or instance), tariff_rules (off-peak
prices, versioned by retirement) and the rules each allocation is rated by (allocations.tariffs_json).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "verifications",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("institution", sa.String(length=128), nullable=False),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("requested_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("decided_at_ms", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_verifications_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_verifications")),
    )
    op.create_index(op.f("ix_verifications_user_id"), "verifications", ["user_id"])
    op.create_table(
        "budgets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("billing_account_id", sa.Integer(), nullable=False),
        sa.Column("scope", sa.String(length=64), nullable=False),
        sa.Column("period", sa.String(length=8), nullable=False),
        sa.Column("soft_minor", sa.BigInteger(), nullable=True),
        sa.Column("hard_minor", sa.BigInteger(), nullable=True),
        sa.Column("notified_pct", sa.Integer(), nullable=False),
        sa.Column("notified_period", sa.String(length=7), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["billing_account_id"], ["billing_accounts.id"], name=op.f("fk_budgets_billing_account_id_billing_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budgets")),
        sa.UniqueConstraint("billing_account_id", "scope", name="uq_budgets_account_scope"),
    )
    op.create_index(op.f("ix_budgets_billing_account_id"), "budgets", ["billing_account_id"])
    op.create_table(
        "tariff_rules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("days", sa.String(length=32), nullable=False),
        sa.Column("start", sa.String(length=5), nullable=False),
        sa.Column("end", sa.String(length=5), nullable=False),
        sa.Column("multiplier", sa.String(length=16), nullable=False),
        sa.Column("plans", sa.String(length=64), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("retired_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tariff_rules")),
    )
    with op.batch_alter_table("allocations", schema=None) as b:
        b.add_column(sa.Column("tariffs_json", sa.Text(), server_default="", nullable=False))
    with op.batch_alter_table("instances", schema=None) as b:
        b.add_column(sa.Column("storage_allocation_id", sa.BigInteger(), nullable=True))
        b.add_column(sa.Column("stopped_at_ms", sa.BigInteger(), nullable=True))
        b.add_column(sa.Column("storage_warned_at_ms", sa.BigInteger(), nullable=True))
        b.add_column(sa.Column("workspace_released_at_ms", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as b:
        for column in ("workspace_released_at_ms", "storage_warned_at_ms", "stopped_at_ms", "storage_allocation_id"):
            b.drop_column(column)
    with op.batch_alter_table("allocations", schema=None) as b:
        b.drop_column("tariffs_json")
    op.drop_table("tariff_rules")
    op.drop_table("budgets")
    op.drop_index(op.f("ix_verifications_user_id"), table_name="verifications")
    op.drop_table("verifications")

"""packages and reserved commitments: plan terms, capacity holds, one-off charges

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 18:00:00

A package (a day, week or month of N GPUs) or a reserved commitment (1, 3, 6 or 12 months) is a
capacity hold (docs/billing.md "Packages and reservations"): ``holds`` names the billing account,
the GPUs it keeps (``gpus.hold_id``), its prepaid price and its term (``plan_terms``, the
operator's discounts and cancellation fees, versioned by supersession). What an account pays for
a hold, and gets back when it cancels early, is a ``charges`` row: an invoice line beside usage.
Instances running on held GPUs have allocations that name the hold (``allocations.hold_id``).
A cancellation quote (``hold_quotes``) is what the confirming call must echo.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "plan_terms",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("term", sa.String(length=16), nullable=False),
        sa.Column("discount_bp", sa.Integer(), nullable=False),
        sa.Column("cancel_fee_bp", sa.Integer(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("superseded_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_plan_terms")),
    )
    op.create_table(
        "holds",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("billing_account_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("term", sa.String(length=16), nullable=False),
        sa.Column("plan_term_id", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(length=32), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("price_plan_id", sa.Integer(), nullable=False),
        sa.Column("price_per_hour_minor", sa.BigInteger(), nullable=False),
        sa.Column("discount_bp", sa.Integer(), nullable=False),
        sa.Column("cancel_fee_bp", sa.Integer(), nullable=False),
        sa.Column("paid_minor", sa.BigInteger(), nullable=False),
        sa.Column("on_expiry", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("instance_id", sa.String(length=32), nullable=True),
        sa.Column("starts_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("ends_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("ended_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["billing_account_id"], ["billing_accounts.id"], name=op.f("fk_holds_billing_account_id_billing_accounts")
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_holds_user_id_users")),
        sa.ForeignKeyConstraint(["plan_term_id"], ["plan_terms.id"], name=op.f("fk_holds_plan_term_id_plan_terms")),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name=op.f("fk_holds_host_id_hosts")),
        sa.ForeignKeyConstraint(["price_plan_id"], ["price_plans.id"], name=op.f("fk_holds_price_plan_id_price_plans")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_holds")),
    )
    op.create_index(op.f("ix_holds_billing_account_id"), "holds", ["billing_account_id"])
    op.create_index("ix_holds_state_ends", "holds", ["state", "ends_at_ms"])
    op.create_table(
        "charges",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("billing_account_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("hold_id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("plan", sa.String(length=16), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("seconds", sa.BigInteger(), nullable=False),
        sa.Column("price_per_hour_minor", sa.BigInteger(), nullable=False),
        sa.Column("gross_minor", sa.BigInteger(), nullable=False),
        sa.Column("discount_minor", sa.BigInteger(), nullable=False),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("transaction_id", sa.Integer(), nullable=False),
        sa.Column("invoice_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["billing_account_id"],
            ["billing_accounts.id"],
            name=op.f("fk_charges_billing_account_id_billing_accounts"),
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_charges_user_id_users")),
        sa.ForeignKeyConstraint(["hold_id"], ["holds.id"], name=op.f("fk_charges_hold_id_holds")),
        sa.ForeignKeyConstraint(
            ["transaction_id"], ["ledger_transactions.id"], name=op.f("fk_charges_transaction_id_ledger_transactions")
        ),
        sa.ForeignKeyConstraint(["invoice_id"], ["invoices.id"], name=op.f("fk_charges_invoice_id_invoices")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_charges")),
        sa.UniqueConstraint("hold_id", "kind", name="uq_charges_hold_kind"),
    )
    op.create_index(op.f("ix_charges_billing_account_id"), "charges", ["billing_account_id"])
    op.create_index(op.f("ix_charges_invoice_id"), "charges", ["invoice_id"])
    op.create_table(
        "hold_quotes",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("hold_id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("refund_minor", sa.BigInteger(), nullable=False),
        sa.Column("kept_minor", sa.BigInteger(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["hold_id"], ["holds.id"], name=op.f("fk_hold_quotes_hold_id_holds")),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_hold_quotes_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_hold_quotes")),
    )
    with op.batch_alter_table("gpus", schema=None) as b:
        b.add_column(sa.Column("hold_id", sa.String(length=32), nullable=True))
        b.create_index(b.f("ix_gpus_hold_id"), ["hold_id"])
    with op.batch_alter_table("allocations", schema=None) as b:
        b.add_column(sa.Column("hold_id", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("allocations", schema=None) as b:
        b.drop_column("hold_id")
    with op.batch_alter_table("gpus", schema=None) as b:
        b.drop_index(b.f("ix_gpus_hold_id"))
        b.drop_column("hold_id")
    op.drop_table("hold_quotes")
    op.drop_index(op.f("ix_charges_invoice_id"), table_name="charges")
    op.drop_index(op.f("ix_charges_billing_account_id"), table_name="charges")
    op.drop_table("charges")
    op.drop_index("ix_holds_state_ends", table_name="holds")
    op.drop_index(op.f("ix_holds_billing_account_id"), table_name="holds")
    op.drop_table("holds")
    op.drop_table("plan_terms")

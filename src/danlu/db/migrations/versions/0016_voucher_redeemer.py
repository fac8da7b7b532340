"""Who redeemed a voucher code: a code is once per person, whichever account it goes to

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05 15:00:00

``voucher_grants.redeemed_by_user_id`` (NULL for sign-up and operator grants). Any renter can make
teams, each a billing account of its own, so "once per account" let one person redeem a code onto team
after team; the limit now counts the person's redemptions too (docs/billing.md "Vouchers").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("voucher_grants") as b:
        b.add_column(sa.Column("redeemed_by_user_id", sa.Integer(), nullable=True))
        b.create_foreign_key(
            op.f("fk_voucher_grants_redeemed_by_user_id_users"), "users", ["redeemed_by_user_id"], ["id"]
        )
        b.create_index(op.f("ix_voucher_grants_redeemed_by_user_id"), ["redeemed_by_user_id"])


def downgrade() -> None:
    with op.batch_alter_table("voucher_grants") as b:
        b.drop_index(op.f("ix_voucher_grants_redeemed_by_user_id"))
        b.drop_constraint(op.f("fk_voucher_grants_redeemed_by_user_id_users"), type_="foreignkey")
        b.drop_column("redeemed_by_user_id")

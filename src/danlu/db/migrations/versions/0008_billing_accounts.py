"""billing accounts, teams, versioned price plans, vouchers, invoices, idempotency, events

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 14:00:00

Money gets its owner once (docs/billing.md): every user gets a personal billing account, which
takes over the user's credit limit and ledger cash account; instances, jobs and allocations name
the billing account that pays. Allocations point at an immutable price plan: one plan row per
(model, plan, price, currency) found in history, plus one per current price. Final invoices and
their lines are made immutable by triggers on both databases.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_PG_GUARDS = [
    """
    CREATE FUNCTION danlu_invoice_guard() RETURNS trigger AS $$
    BEGIN
        IF OLD.status = 'final' THEN
            RAISE EXCEPTION 'invoice % is final and cannot be changed or deleted', OLD.id;
        END IF;
        IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql
    """,
    "CREATE TRIGGER invoices_final_guard BEFORE UPDATE OR DELETE ON invoices "
    "FOR EACH ROW EXECUTE FUNCTION danlu_invoice_guard()",
    """
    CREATE FUNCTION danlu_invoice_line_guard() RETURNS trigger AS $$
    DECLARE parent integer;
    BEGIN
        IF TG_OP = 'INSERT' THEN parent := NEW.invoice_id; ELSE parent := OLD.invoice_id; END IF;
        IF (SELECT status FROM invoices WHERE id = parent) = 'final' THEN
            RAISE EXCEPTION 'invoice % is final: its lines cannot be added, changed or deleted', parent;
        END IF;
        IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql
    """,
    "CREATE TRIGGER invoice_lines_final_guard BEFORE INSERT OR UPDATE OR DELETE ON invoice_lines "
    "FOR EACH ROW EXECUTE FUNCTION danlu_invoice_line_guard()",
]

_SQLITE_GUARDS = [
    "CREATE TRIGGER invoices_final_no_update BEFORE UPDATE ON invoices WHEN OLD.status = 'final' "
    "BEGIN SELECT RAISE(ABORT, 'invoice is final and cannot be changed'); END",
    "CREATE TRIGGER invoices_final_no_delete BEFORE DELETE ON invoices WHEN OLD.status = 'final' "
    "BEGIN SELECT RAISE(ABORT, 'invoice is final and cannot be deleted'); END",
    "CREATE TRIGGER invoice_lines_final_no_insert BEFORE INSERT ON invoice_lines "
    "WHEN (SELECT status FROM invoices WHERE id = NEW.invoice_id) = 'final' "
    "BEGIN SELECT RAISE(ABORT, 'invoice is final: no lines can be added'); END",
    "CREATE TRIGGER invoice_lines_final_no_update BEFORE UPDATE ON invoice_lines "
    "WHEN (SELECT status FROM invoices WHERE id = OLD.invoice_id) = 'final' "
    "BEGIN SELECT RAISE(ABORT, 'invoice is final: its lines cannot be changed'); END",
    "CREATE TRIGGER invoice_lines_final_no_delete BEFORE DELETE ON invoice_lines "
    "WHEN (SELECT status FROM invoices WHERE id = OLD.invoice_id) = 'final' "
    "BEGIN SELECT RAISE(ABORT, 'invoice is final: its lines cannot be deleted'); END",
]


def _new_tables() -> None:
    op.create_table(
        "billing_accounts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("credit_limit_minor", sa.BigInteger(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_billing_accounts_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_billing_accounts")),
        sa.UniqueConstraint("user_id", name=op.f("uq_billing_accounts_user_id")),
    )
    op.create_table(
        "teams",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("billing_account_id", sa.Integer(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["billing_account_id"], ["billing_accounts.id"], name=op.f("fk_teams_billing_account_id_billing_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_teams")),
        sa.UniqueConstraint("billing_account_id", name=op.f("uq_teams_billing_account_id")),
        sa.UniqueConstraint("name", name=op.f("uq_teams_name")),
    )
    op.create_table(
        "team_members",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("gpu_quota", sa.Integer(), nullable=True),
        sa.Column("added_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_team_members_team_id_teams")),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_team_members_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_team_members")),
        sa.UniqueConstraint("team_id", "user_id", name="uq_team_members_team_user"),
    )
    op.create_index(op.f("ix_team_members_team_id"), "team_members", ["team_id"])
    op.create_index(op.f("ix_team_members_user_id"), "team_members", ["user_id"])
    op.create_table(
        "price_plans",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("price_per_hour_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("superseded_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_price_plans")),
    )
    op.create_index(op.f("ix_price_plans_gpu_model"), "price_plans", ["gpu_model"])
    op.create_table(
        "voucher_campaigns",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("percent_bp", sa.Integer(), nullable=True),
        sa.Column("scope_model", sa.String(length=32), nullable=True),
        sa.Column("scope_plan", sa.String(length=16), nullable=True),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("code", sa.String(length=64), nullable=True),
        sa.Column("eligibility", sa.String(length=16), nullable=False),
        sa.Column("valid_from_ms", sa.BigInteger(), nullable=False),
        sa.Column("valid_until_ms", sa.BigInteger(), nullable=True),
        sa.Column("valid_for_ms", sa.BigInteger(), nullable=True),
        sa.Column("max_redemptions", sa.Integer(), nullable=True),
        sa.Column("max_per_account", sa.Integer(), nullable=False),
        sa.Column("redemptions", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_voucher_campaigns")),
        sa.UniqueConstraint("code", name=op.f("uq_voucher_campaigns_code")),
        sa.UniqueConstraint("name", name=op.f("uq_voucher_campaigns_name")),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("billing_account_id", sa.Integer(), nullable=True),
        sa.Column("instance_id", sa.String(length=32), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["billing_account_id"], ["billing_accounts.id"], name=op.f("fk_events_billing_account_id_billing_accounts")
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_events_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    op.create_index(op.f("ix_events_user_id"), "events", ["user_id"])
    op.create_index(op.f("ix_events_billing_account_id"), "events", ["billing_account_id"])
    op.create_table(
        "idempotency_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("scope", sa.String(length=128), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("response_json", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_idempotency_records")),
        sa.UniqueConstraint("scope", "key", name="uq_idempotency_scope_key"),
    )


def _money_tables() -> None:
    op.create_table(
        "voucher_grants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("billing_account_id", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("granted_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("expired", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["account_id"], ["accounts.id"], name=op.f("fk_voucher_grants_account_id_accounts")),
        sa.ForeignKeyConstraint(
            ["billing_account_id"],
            ["billing_accounts.id"],
            name=op.f("fk_voucher_grants_billing_account_id_billing_accounts"),
        ),
        sa.ForeignKeyConstraint(
            ["campaign_id"], ["voucher_campaigns.id"], name=op.f("fk_voucher_grants_campaign_id_voucher_campaigns")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_voucher_grants")),
        sa.UniqueConstraint("account_id", name=op.f("uq_voucher_grants_account_id")),
        sa.UniqueConstraint("campaign_id", "billing_account_id", "n", name="uq_voucher_grants_once"),
    )
    op.create_index(op.f("ix_voucher_grants_campaign_id"), "voucher_grants", ["campaign_id"])
    op.create_index(op.f("ix_voucher_grants_billing_account_id"), "voucher_grants", ["billing_account_id"])
    op.create_table(
        "invoices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("billing_account_id", sa.Integer(), nullable=False),
        sa.Column("period", sa.String(length=7), nullable=False),
        sa.Column("status", sa.String(length=8), nullable=False),
        sa.Column("number", sa.Integer(), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("total_minor", sa.BigInteger(), nullable=False),
        sa.Column("finalized_at_ms", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["billing_account_id"],
            ["billing_accounts.id"],
            name=op.f("fk_invoices_billing_account_id_billing_accounts"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invoices")),
        sa.UniqueConstraint("billing_account_id", "period", name="uq_invoices_account_period"),
        sa.UniqueConstraint("number", name=op.f("uq_invoices_number")),
    )
    op.create_index(op.f("ix_invoices_billing_account_id"), "invoices", ["billing_account_id"])
    op.create_table(
        "invoice_lines",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("invoice_id", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.String(length=32), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("plan", sa.String(length=16), nullable=False),
        sa.Column("seconds", sa.BigInteger(), nullable=False),
        sa.Column("price_per_hour_minor", sa.BigInteger(), nullable=False),
        sa.Column("gross_minor", sa.BigInteger(), nullable=False),
        sa.Column("discount_minor", sa.BigInteger(), nullable=False),
        sa.Column("voucher_minor", sa.BigInteger(), nullable=False),
        sa.Column("cash_minor", sa.BigInteger(), nullable=False),
        sa.Column("adjustment", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["invoice_id"], ["invoices.id"], name=op.f("fk_invoice_lines_invoice_id_invoices")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invoice_lines")),
    )
    op.create_index(op.f("ix_invoice_lines_invoice_id"), "invoice_lines", ["invoice_id"])
    with op.batch_alter_table("usage_records", schema=None) as b:
        b.add_column(sa.Column("invoice_id", sa.Integer(), nullable=True))
        b.create_foreign_key(op.f("fk_usage_records_invoice_id_invoices"), "invoices", ["invoice_id"], ["id"])
        b.create_index(op.f("ix_usage_records_invoice_id"), ["invoice_id"])


def upgrade() -> None:
    _new_tables()
    conn = op.get_bind()
    # A personal billing account per user, taking over the user's credit limit.
    users = conn.execute(sa.text("SELECT id, name, credit_limit_minor, created_at_ms FROM users ORDER BY id")).all()
    personal: dict[int, int] = {}
    for uid, name, credit, created in users:
        conn.execute(
            sa.text(
                "INSERT INTO billing_accounts (kind, user_id, name, credit_limit_minor, created_at_ms) "
                "VALUES ('personal', :u, :n, :c, :t)"
            ),
            {"u": uid, "n": name, "c": credit or 0, "t": created},
        )
        personal[uid] = conn.execute(
            sa.text("SELECT id FROM billing_accounts WHERE user_id = :u"), {"u": uid}
        ).scalar_one()
    with op.batch_alter_table("users", schema=None) as b:
        b.drop_column("credit_limit_minor")
        b.add_column(sa.Column("default_team_id", sa.Integer(), nullable=True))

    # Ledger accounts: a user's cash account now belongs to the personal billing account.
    with op.batch_alter_table("accounts", schema=None) as b:
        b.add_column(sa.Column("ref", sa.String(length=64), nullable=True))
        b.add_column(sa.Column("billing_account_id", sa.Integer(), nullable=True))
    for acct_id, kind, uid in conn.execute(sa.text("SELECT id, kind, user_id FROM accounts")).all():
        if kind == "user":
            ba = personal[uid]
            conn.execute(
                sa.text("UPDATE accounts SET kind = 'cash', ref = :r, billing_account_id = :b WHERE id = :i"),
                {"r": f"ba:{ba}", "b": ba, "i": acct_id},
            )
        else:
            conn.execute(sa.text("UPDATE accounts SET ref = 'system' WHERE id = :i"), {"i": acct_id})
    with op.batch_alter_table("accounts", schema=None) as b:
        b.drop_constraint("uq_accounts_kind_user", type_="unique")
        b.drop_column("user_id")
        b.alter_column("ref", existing_type=sa.String(length=64), nullable=False)
        b.create_unique_constraint("uq_accounts_kind_ref", ["kind", "ref"])
        b.create_foreign_key(
            op.f("fk_accounts_billing_account_id_billing_accounts"), "billing_accounts", ["billing_account_id"], ["id"]
        )
        b.create_index(op.f("ix_accounts_billing_account_id"), ["billing_account_id"])

    # Who pays for each instance, job and allocation: the renter's personal account.
    for table in ("instances", "jobs", "allocations"):
        with op.batch_alter_table(table, schema=None) as b:
            b.add_column(sa.Column("billing_account_id", sa.Integer(), nullable=True))
        for uid, ba in personal.items():
            conn.execute(sa.text(f"UPDATE {table} SET billing_account_id = :b WHERE user_id = :u"), {"b": ba, "u": uid})

    # Versioned price plans: history keeps its prices; today's prices are the current rows.
    now = conn.execute(sa.text("SELECT COALESCE(MAX(updated_at_ms), 0) FROM prices")).scalar_one()
    for model, price, spot, cur, at in conn.execute(
        sa.text(
            "SELECT gpu_model, price_per_hour_minor, interruptible_price_per_hour_minor, currency, updated_at_ms "
            "FROM prices ORDER BY gpu_model"
        )
    ).all():
        for kind, value in (("on-demand", price), ("interruptible", spot)):
            if value is not None:
                conn.execute(
                    sa.text(
                        "INSERT INTO price_plans (gpu_model, kind, price_per_hour_minor, currency, created_at_ms) "
                        "VALUES (:m, :k, :p, :c, :t)"
                    ),
                    {"m": model, "k": kind, "p": value, "c": cur, "t": at},
                )
    with op.batch_alter_table("allocations", schema=None) as b:
        b.add_column(sa.Column("price_plan_id", sa.Integer(), nullable=True))
        b.add_column(sa.Column("discount_bp", sa.Integer(), server_default="0", nullable=False))
    for model, plan, price, cur, first in conn.execute(
        sa.text(
            "SELECT gpu_model, plan, price_per_hour_minor, currency, MIN(started_at_ms) FROM allocations "
            "GROUP BY gpu_model, plan, price_per_hour_minor, currency"
        )
    ).all():
        found = conn.execute(
            sa.text(
                "SELECT id FROM price_plans WHERE gpu_model = :m AND kind = :k AND price_per_hour_minor = :p "
                "AND currency = :c AND superseded_at_ms IS NULL"
            ),
            {"m": model, "k": plan, "p": price, "c": cur},
        ).scalar()
        if found is None:  # an earlier price: a superseded plan row of its own
            conn.execute(
                sa.text(
                    "INSERT INTO price_plans (gpu_model, kind, price_per_hour_minor, currency, created_at_ms, "
                    "superseded_at_ms) VALUES (:m, :k, :p, :c, :t, :s)"
                ),
                {"m": model, "k": plan, "p": price, "c": cur, "t": first, "s": now},
            )
            found = conn.execute(
                sa.text(
                    "SELECT MAX(id) FROM price_plans WHERE gpu_model = :m AND kind = :k AND price_per_hour_minor = :p"
                ),
                {"m": model, "k": plan, "p": price},
            ).scalar_one()
        conn.execute(
            sa.text(
                "UPDATE allocations SET price_plan_id = :i WHERE gpu_model = :m AND plan = :k "
                "AND price_per_hour_minor = :p AND currency = :c"
            ),
            {"i": found, "m": model, "k": plan, "p": price, "c": cur},
        )

    for table in ("instances", "jobs", "allocations"):
        with op.batch_alter_table(table, schema=None) as b:
            b.alter_column("billing_account_id", existing_type=sa.Integer(), nullable=False)
            b.create_foreign_key(
                op.f(f"fk_{table}_billing_account_id_billing_accounts"),
                "billing_accounts",
                ["billing_account_id"],
                ["id"],
            )
            b.create_index(op.f(f"ix_{table}_billing_account_id"), ["billing_account_id"])
    with op.batch_alter_table("allocations", schema=None) as b:
        b.alter_column("price_plan_id", existing_type=sa.Integer(), nullable=False)
        b.create_foreign_key(op.f("fk_allocations_price_plan_id_price_plans"), "price_plans", ["price_plan_id"], ["id"])
        b.create_index(op.f("ix_allocations_price_plan_id"), ["price_plan_id"])

    # The split of each usage record: before this, nothing was discounted or paid by voucher.
    with op.batch_alter_table("usage_records", schema=None) as b:
        b.add_column(sa.Column("gross_minor", sa.BigInteger(), server_default="0", nullable=False))
        b.add_column(sa.Column("discount_minor", sa.BigInteger(), server_default="0", nullable=False))
        b.add_column(sa.Column("voucher_minor", sa.BigInteger(), server_default="0", nullable=False))
    conn.execute(sa.text("UPDATE usage_records SET gross_minor = amount_minor"))

    _money_tables()
    for statement in _PG_GUARDS if conn.dialect.name == "postgresql" else _SQLITE_GUARDS:
        conn.execute(sa.text(statement))


def downgrade() -> None:
    raise NotImplementedError("0008 moves money to billing accounts; restore a backup to go back")

"""The ledger is append-only in the database, on both (issue 28, finding 6)

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06 04:00:00

Money is only ever added to (docs/billing.md): a correction is a new balancing transaction, never an
edit. Until now only final invoices and their lines were guarded (0008), and on PostgreSQL a
``TRUNCATE invoice_lines`` or ``TRUNCATE invoices CASCADE`` (which also empties ``usage_records`` and
``charges``) went past those row triggers; on SQLite ledger rows could be changed or deleted freely.

- ``ledger_transactions`` and ``ledger_entries``: no UPDATE, no DELETE (row triggers on both).
- ``usage_records`` and ``charges`` on a final invoice: no UPDATE, no DELETE (they are written, then
  stamped with their invoice once, while it is being finalised).
- PostgreSQL: no TRUNCATE of any of these, of ``invoices`` or of ``invoice_lines`` (statement
  triggers; a CASCADE fires the trigger of every table it would empty). SQLite has no TRUNCATE: its
  ``DELETE FROM t`` runs the row triggers above (a table with triggers is never truncated wholesale).
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

LEDGER = ("ledger_transactions", "ledger_entries")
INVOICED = ("usage_records", "charges")
NO_TRUNCATE = (*LEDGER, *INVOICED, "invoices", "invoice_lines")

_PG = [
    """
    CREATE FUNCTION danlu_append_only() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION '% is append-only: % refused (a correction is a new transaction)', TG_TABLE_NAME, TG_OP;
    END $$ LANGUAGE plpgsql
    """,
    """
    CREATE FUNCTION danlu_invoiced_guard() RETURNS trigger AS $$
    BEGIN
        IF OLD.invoice_id IS NOT NULL AND (SELECT status FROM invoices WHERE id = OLD.invoice_id) = 'final' THEN
            RAISE EXCEPTION '% row % is on final invoice %: % refused', TG_TABLE_NAME, OLD.id, OLD.invoice_id, TG_OP;
        END IF;
        IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql
    """,
    *(
        f"CREATE TRIGGER {t}_append_only BEFORE UPDATE OR DELETE ON {t} "
        "FOR EACH ROW EXECUTE FUNCTION danlu_append_only()"
        for t in LEDGER
    ),
    *(
        f"CREATE TRIGGER {t}_final_guard BEFORE UPDATE OR DELETE ON {t} "
        "FOR EACH ROW EXECUTE FUNCTION danlu_invoiced_guard()"
        for t in INVOICED
    ),
    *(
        f"CREATE TRIGGER {t}_no_truncate BEFORE TRUNCATE ON {t} "
        "FOR EACH STATEMENT EXECUTE FUNCTION danlu_append_only()"
        for t in NO_TRUNCATE
    ),
]


def _sqlite() -> list[str]:
    out = []
    for t in LEDGER:
        for op_ in ("UPDATE", "DELETE"):
            out.append(
                f"CREATE TRIGGER {t}_no_{op_.lower()} BEFORE {op_} ON {t} "
                f"BEGIN SELECT RAISE(ABORT, '{t} is append-only: {op_} refused'); END"
            )
    for t in INVOICED:
        for op_ in ("UPDATE", "DELETE"):
            out.append(
                f"CREATE TRIGGER {t}_final_no_{op_.lower()} BEFORE {op_} ON {t} "
                "WHEN OLD.invoice_id IS NOT NULL AND (SELECT status FROM invoices WHERE id = OLD.invoice_id) = 'final' "
                f"BEGIN SELECT RAISE(ABORT, '{t} row is on a final invoice: {op_} refused'); END"
            )
    return out


def upgrade() -> None:
    for statement in _PG if op.get_bind().dialect.name == "postgresql" else _sqlite():
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for t in NO_TRUNCATE:
            op.execute(f"DROP TRIGGER IF EXISTS {t}_no_truncate ON {t}")
        for t in LEDGER:
            op.execute(f"DROP TRIGGER IF EXISTS {t}_append_only ON {t}")
        for t in INVOICED:
            op.execute(f"DROP TRIGGER IF EXISTS {t}_final_guard ON {t}")
        op.execute("DROP FUNCTION IF EXISTS danlu_invoiced_guard()")
        op.execute("DROP FUNCTION IF EXISTS danlu_append_only()")
        return
    for t in LEDGER:
        for name in ("update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS {t}_no_{name}")
    for t in INVOICED:
        for name in ("update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS {t}_final_no_{name}")

"""No INSERT over an existing money row: SQLite's REPLACE got past the append-only triggers (issue 28)

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07 07:00:00

An attacker's pass with the ``sqlite3`` shell: ``INSERT OR REPLACE INTO ledger_entries … SELECT id, …, 999999``
rewrote an amount, ``REPLACE INTO invoices … 'draft'`` turned a final invoice back into a draft (then its usage
could be edited). REPLACE deletes the row in its way without firing DELETE triggers (unless the connection set
``PRAGMA recursive_triggers``, which a shell does not). So each append-only table gets a BEFORE INSERT trigger
that refuses a row clashing with an existing one on any of its unique keys: a REPLACE, or an upsert (whose
update part the UPDATE triggers refuse anyway), changes nothing. The platform itself never inserts over a row;
an ordinary clash was already a constraint error, and stays one (``RAISE(ABORT)`` is SQLite's constraint
error). PostgreSQL has no REPLACE; its ``INSERT … ON CONFLICT DO UPDATE`` fires the row UPDATE triggers of 0019.
"""

from __future__ import annotations

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

# Each append-only table and its unique keys (column tuples).
KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    "ledger_transactions": (("id",), ("idempotency_key",)),
    "ledger_entries": (("id",),),
    "usage_records": (("id",), ("allocation_id", "start_ms")),
    "charges": (("id",), ("hold_id", "kind")),
    "invoices": (("id",), ("billing_account_id", "period"), ("number",)),
    "invoice_lines": (("id",),),
}


def _trigger(table: str, keys: tuple[tuple[str, ...], ...]) -> str:
    clash = " OR ".join("(" + " AND ".join(f"o.{c} = NEW.{c}" for c in key) + ")" for key in keys)
    return (
        f"CREATE TRIGGER {table}_no_replace BEFORE INSERT ON {table} "
        f"WHEN EXISTS (SELECT 1 FROM {table} AS o WHERE {clash}) "
        f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: an INSERT over an existing row (REPLACE) refused'); END"
    )


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table, keys in KEYS.items():
        op.execute(_trigger(table, keys))


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in KEYS:
        op.execute(f"DROP TRIGGER IF EXISTS {table}_no_replace")

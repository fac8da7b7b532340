"""start/stop schedules of instances; low-balance and voucher-expiring alerts

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 15:00:00

One timetable per instance (``instance_schedules``): stop and/or start at a wall-clock time on some
weekdays, in the deployment's zone; the loop acts on rows whose ``next_due_ms`` has come
(danlu.compute.schedules, docs/telemetry.md "Schedules"). When a billing account was warned that
its money runs out soon, and a voucher that it expires soon (danlu.notify.alerts), so each is said once.
A run's samples also keep its workspace size and its network namespace's byte counters.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "instance_schedules",
        sa.Column("instance_id", sa.String(length=32), sa.ForeignKey("instances.id"), nullable=False),
        sa.Column("stop_hm", sa.String(length=5), nullable=True),
        sa.Column("start_hm", sa.String(length=5), nullable=True),
        sa.Column("days", sa.String(length=16), nullable=False),
        sa.Column("acted_until_ms", sa.BigInteger(), nullable=False),
        sa.Column("next_due_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("instance_id"),
    )
    op.create_index("ix_instance_schedules_next_due_ms", "instance_schedules", ["next_due_ms"])
    with op.batch_alter_table("billing_accounts") as t:
        t.add_column(sa.Column("low_balance_warned_at_ms", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("voucher_grants") as t:
        t.add_column(sa.Column("expiry_warned_at_ms", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("metric_samples") as t:
        t.add_column(sa.Column("disk_mb", sa.BigInteger(), nullable=True))
        t.add_column(sa.Column("net_rx_bytes", sa.BigInteger(), nullable=True))
        t.add_column(sa.Column("net_tx_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("metric_samples") as t:
        for column in ("net_tx_bytes", "net_rx_bytes", "disk_mb"):
            t.drop_column(column)
    with op.batch_alter_table("voucher_grants") as t:
        t.drop_column("expiry_warned_at_ms")
    with op.batch_alter_table("billing_accounts") as t:
        t.drop_column("low_balance_warned_at_ms")
    op.drop_index("ix_instance_schedules_next_due_ms", table_name="instance_schedules")
    op.drop_table("instance_schedules")

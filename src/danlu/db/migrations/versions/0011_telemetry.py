"""telemetry samples, idle auto-stop and maximum duration, stop reasons

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 21:30:00

``metric_samples`` holds what the control loop measures of each running instance (docs/telemetry.md):
one row per GPU (``gpu_index`` ≥ 0) and one for the run itself (−1) per sample, at raw, 1-minute or
1-hour resolution. Instances and jobs get their idle-stop window and threshold and their maximum
duration; instances remember why they were last stopped (``stop_reason``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("instance_id", sa.String(length=32), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("res", sa.String(length=4), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("util_pm", sa.Integer(), nullable=True),
        sa.Column("util_max_pm", sa.Integer(), nullable=True),
        sa.Column("mem_mb", sa.BigInteger(), nullable=True),
        sa.Column("power_mw", sa.BigInteger(), nullable=True),
        sa.Column("temp_c", sa.Integer(), nullable=True),
        sa.Column("simulated", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_samples")),
    )
    op.create_index("ix_metric_samples_instance_res_at", "metric_samples", ["instance_id", "res", "at_ms"])
    op.create_index("ix_metric_samples_res_at", "metric_samples", ["res", "at_ms"])
    with op.batch_alter_table("instances", schema=None) as b:
        b.add_column(sa.Column("idle_stop_s", sa.Integer(), nullable=True))
        b.add_column(sa.Column("idle_threshold_pm", sa.Integer(), server_default="50", nullable=False))
        b.add_column(sa.Column("max_duration_s", sa.Integer(), nullable=True))
        b.add_column(sa.Column("stop_reason", sa.Text(), server_default="", nullable=False))
    with op.batch_alter_table("jobs", schema=None) as b:
        b.add_column(sa.Column("idle_stop_s", sa.Integer(), nullable=True))
        b.add_column(sa.Column("idle_threshold_pm", sa.Integer(), server_default="50", nullable=False))
        b.add_column(sa.Column("max_duration_s", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as b:
        for column in ("max_duration_s", "idle_threshold_pm", "idle_stop_s"):
            b.drop_column(column)
    with op.batch_alter_table("instances", schema=None) as b:
        for column in ("stop_reason", "max_duration_s", "idle_threshold_pm", "idle_stop_s"):
            b.drop_column(column)
    op.drop_index("ix_metric_samples_res_at", table_name="metric_samples")
    op.drop_index("ix_metric_samples_instance_res_at", table_name="metric_samples")
    op.drop_table("metric_samples")

"""sandboxed runs: opaque run handles, per-renter uids, host limits, images, renter env

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 08:00:00

The executor became a backend with an opaque run handle: ``instances.pid`` and
``instances.proc_start_ticks`` are folded into ``instances.run_handle`` (the local backend's
handle is JSON that still names the process and its exit file, so runs started before the
upgrade are adopted, unsandboxed, as they were).
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users", schema=None) as b:
        b.add_column(sa.Column("sandbox_uid", sa.Integer(), nullable=True))
        b.add_column(sa.Column("suspended_reason", sa.Text(), nullable=True))
        b.create_unique_constraint("uq_users_sandbox_uid", ["sandbox_uid"])
    with op.batch_alter_table("hosts", schema=None) as b:
        b.add_column(sa.Column("cpus_per_gpu_milli", sa.Integer(), server_default="1000", nullable=False))
        b.add_column(sa.Column("mem_per_gpu_mb", sa.BigInteger(), server_default="4096", nullable=False))
        b.add_column(sa.Column("disk_per_gpu_mb", sa.BigInteger(), server_default="51200", nullable=False))
        b.add_column(sa.Column("pids_per_gpu", sa.Integer(), server_default="1024", nullable=False))
        b.add_column(sa.Column("network_policy", sa.String(16), server_default="none", nullable=False))
    with op.batch_alter_table("gpus", schema=None) as b:
        b.add_column(sa.Column("device_minor", sa.Integer(), nullable=True))
    with op.batch_alter_table("jobs", schema=None) as b:
        b.add_column(sa.Column("image", sa.String(64), server_default="host", nullable=False))
        b.add_column(sa.Column("env_json", sa.Text(), server_default="{}", nullable=False))
    with op.batch_alter_table("instances", schema=None) as b:
        b.add_column(sa.Column("image", sa.String(64), server_default="host", nullable=False))
        b.add_column(sa.Column("env_json", sa.Text(), server_default="{}", nullable=False))
        b.add_column(sa.Column("run_handle", sa.Text(), nullable=True))
        b.add_column(sa.Column("sandbox_json", sa.Text(), server_default="", nullable=False))

    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, job_id, pid, proc_start_ticks FROM instances WHERE pid IS NOT NULL")).all()
    for inst_id, job_id, pid, ticks in rows:
        key = job_id or inst_id
        handle = json.dumps(
            {"pid": pid, "ticks": ticks or 0, "exit": f"runs/{key}/exit", "log": key, "run": inst_id},
            sort_keys=True,
        )
        conn.execute(sa.text("UPDATE instances SET run_handle = :h WHERE id = :i"), {"h": handle, "i": inst_id})

    with op.batch_alter_table("instances", schema=None) as b:
        b.drop_column("pid")
        b.drop_column("proc_start_ticks")

    op.create_table(
        "images",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("root_path", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_images")),
    )


def downgrade() -> None:
    op.drop_table("images")
    with op.batch_alter_table("instances", schema=None) as b:
        b.add_column(sa.Column("pid", sa.Integer(), nullable=True))
        b.add_column(sa.Column("proc_start_ticks", sa.BigInteger(), nullable=True))
        b.drop_column("sandbox_json")
        b.drop_column("run_handle")
        b.drop_column("env_json")
        b.drop_column("image")
    with op.batch_alter_table("jobs", schema=None) as b:
        b.drop_column("env_json")
        b.drop_column("image")
    with op.batch_alter_table("gpus", schema=None) as b:
        b.drop_column("device_minor")
    with op.batch_alter_table("hosts", schema=None) as b:
        for col in ("network_policy", "pids_per_gpu", "disk_per_gpu_mb", "mem_per_gpu_mb", "cpus_per_gpu_milli"):
            b.drop_column(col)
    with op.batch_alter_table("users", schema=None) as b:
        b.drop_constraint("uq_users_sandbox_uid", type_="unique")
        b.drop_column("suspended_reason")
        b.drop_column("sandbox_uid")

"""A job may wait for another to succeed (issue 26, item 6: ``danlu run --after JOB``)

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07 06:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("after_job_id", sa.String(32), nullable=True))
        batch.create_index("ix_jobs_after_job_id", ["after_job_id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_after_job_id")
        batch.drop_column("after_job_id")

"""A typed cause beside each instance's stop reason (issue 27)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06 07:00:00

``instances.stop_cause`` (danlu.compute.lifecycle.StopCause) says why a run was stopped in a word the
code decides from; ``stop_reason`` keeps the words a person reads. Until now a job's outcome was read
from the prefix of the words. Rows stopped before this revision get the cause their words imply.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# The words each stop wrote before this revision, in the order they are matched.
_PREFIXES = [
    ("idle:", "idle"),
    ("maximum duration:", "max_duration"),
    ("scheduled stop", "schedule"),
    ("hard budget cap", "budget_cap"),
    ("balance exhausted", "balance"),
    ("job cancelled", "job_cancelled"),
    ("stop requested by user", "user"),
    ("account suspended", "operator"),
]


def upgrade() -> None:
    op.add_column("instances", sa.Column("stop_cause", sa.String(24), nullable=False, server_default=""))
    instances = sa.table("instances", sa.column("stop_reason", sa.Text), sa.column("stop_cause", sa.String))
    for prefix, cause in _PREFIXES:
        op.execute(
            instances.update()
            .where(instances.c.stop_cause == "", instances.c.stop_reason.like(prefix + "%"))
            .values(stop_cause=cause)
        )


def downgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("stop_cause")

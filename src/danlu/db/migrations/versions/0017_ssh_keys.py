"""SSH public keys: a person's keys for the SSH gateway (issue 25)

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 21:00:00

``ssh_keys``: the key in OpenSSH form and its SHA-256 fingerprint, unique over everyone (a key is one
person's: the gateway knows who connects from the key alone), a name, when it was added.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ssh_keys",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", name="fk_ssh_keys_user_id_users"), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_ssh_keys"),
        sa.UniqueConstraint("fingerprint", name="uq_ssh_keys_fingerprint"),
    )
    op.create_index("ix_ssh_keys_user_id", "ssh_keys", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_ssh_keys_user_id", table_name="ssh_keys")
    op.drop_table("ssh_keys")

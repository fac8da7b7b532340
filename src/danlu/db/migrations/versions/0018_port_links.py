"""Port links: a renter's revocable link to one port of one instance (issue 25)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 00:30:00

``port_links``: a link opens one published port of one instance through the port proxy for whoever
holds it (a colleague's browser, no danlu account), made by someone who may manage the instance.
Only the token's SHA-256 is kept (unique); revoking sets ``revoked_at_ms`` (the row stays, so the
list of who was given what can be read after).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "port_links",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "instance_id",
            sa.String(32),
            sa.ForeignKey("instances.id", name="fk_port_links_instance_id_instances"),
            nullable=False,
        ),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column(
            "created_by", sa.Integer(), sa.ForeignKey("users.id", name="fk_port_links_created_by_users"), nullable=False
        ),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("revoked_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_port_links"),
        sa.UniqueConstraint("token_hash", name="uq_port_links_token_hash"),
    )
    op.create_index("ix_port_links_instance_id", "port_links", ["instance_id"])


def downgrade() -> None:
    op.drop_index("ix_port_links_instance_id", table_name="port_links")
    op.drop_table("port_links")

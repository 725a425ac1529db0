"""Lease-scoped tokens: ``tokens.lease_id`` names the one lease a token may act on (read, heartbeat,
release), while that lease is held.

Revision ID: 0005_lease_tokens
Revises: 0004_lease_checkpoints
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_lease_tokens"
down_revision = "0004_lease_checkpoints"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("lease_id", sa.String(length=64), nullable=True))
        batch.create_index("ix_tokens_lease_id", ["lease_id"])


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_index("ix_tokens_lease_id")
        batch.drop_column("lease_id")

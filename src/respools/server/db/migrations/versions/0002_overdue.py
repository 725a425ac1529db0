"""Overdue leases: ``leases.overdue_since`` records when a preempting lease passed its grace deadline
unreleased; it keeps its capacity until a release, a confirmed stop or a full TTL of silence.

Revision ID: 0002_overdue
Revises: 0001
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_overdue"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.add_column(sa.Column("overdue_since", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("overdue_since")

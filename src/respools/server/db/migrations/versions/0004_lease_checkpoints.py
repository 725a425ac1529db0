"""Lease checkpoints: ``leases.checkpointed_at`` (the holder's last "checkpoint taken", server time) and
``leases.checkpoints`` (how many it reported), so the usage ledger can tell the work a preemption lost
(held since the last checkpoint) from the whole preempted time. And ``ix_leases_released``: the
ledger's window query (leases that ended after the window's start, or live) reads the recent end of a
long history through it — the dashboard's utilization charts ask for the last hour on every refresh.

Revision ID: 0004_lease_checkpoints
Revises: 0003_grant_order
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_lease_checkpoints"
down_revision = "0003_grant_order"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.add_column(sa.Column("checkpointed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("checkpoints", sa.Integer(), nullable=False, server_default="0"))
    op.create_index("ix_leases_released", "leases", ["released_at"])


def downgrade() -> None:
    op.drop_index("ix_leases_released", table_name="leases")
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("checkpoints")
        batch.drop_column("checkpointed_at")

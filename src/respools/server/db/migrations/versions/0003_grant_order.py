"""Grant order: ``leases.grant_seq``, a grant's place among those of its cycle, so that grants made in
one cycle (one ``granted_at``) still have a total order for "most recently granted" (DESIGN §2.5).

Revision ID: 0003_grant_order
Revises: 0002_overdue
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_grant_order"
down_revision = "0002_overdue"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("leases", sa.Column("grant_seq", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("leases", "grant_seq")

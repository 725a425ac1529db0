"""Usage roll-up: ``usage_rollup`` holds ended leases' usage pre-summed per hour and per day, subject, pool
and key (exact integer key-microseconds); ``leases.usage_rolled`` says which leases it holds (0: not
yet, 1: yes, 2: yes and held longer than a day), with the indexes a usage query reads the rest through:
the leases not rolled up (``ix_leases_unrolled``), and on the window's ragged edges the rolled-up ones
by grant (``ix_leases_granted``, with the end beside it so that only the overlapping ones are read) or,
for the few long ones, by end (``ix_leases_rolled_long``). Existing leases start at 0 and the leader
rolls them up in batches after the upgrade; until then they are summed on read as before.

Revision ID: 0006_usage_rollup
Revises: 0005_lease_tokens
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_usage_rollup"
down_revision = "0005_lease_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.add_column(sa.Column("usage_rolled", sa.Integer(), nullable=False, server_default="0"))
    op.create_index("ix_leases_granted", "leases", ["granted_at", "released_at"])
    for name, column, where in (
        ("ix_leases_unrolled", "granted_at", "usage_rolled = 0"),
        ("ix_leases_rolled_long", "released_at", "usage_rolled = 2"),
    ):
        op.create_index(name, "leases", [column], postgresql_where=sa.text(where), sqlite_where=sa.text(where))
    bind = op.get_bind()
    if bind.dialect.name == "postgresql" and bind.execute(sa.text("SELECT EXISTS (SELECT 1 FROM leases)")).scalar():
        # the planner has no statistics for the new column yet: without them it takes "usage_rolled = 0"
        # for a rare value and reads the whole history for each roll-up batch until autovacuum analyzes.
        # Only a history needs it: analyzing an empty table would tell the leader's early statistics
        # (reconciler/statistics.py) that leases was analyzed already, and a young database would keep
        # its first plans (sequential scans) until autovacuum came.
        op.execute("ANALYZE leases")
    amount = sa.BigInteger().with_variant(sa.Numeric(38, 0), "postgresql")
    op.create_table(
        "usage_rollup",
        sa.Column("width", sa.String(length=4), primary_key=True),
        sa.Column("bucket", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("subject", sa.String(length=63), primary_key=True),
        sa.Column("pool", sa.String(length=63), primary_key=True),
        sa.Column("key", sa.String(length=63), primary_key=True),
        sa.Column("held", amount, nullable=False),
        sa.Column("borrowed", amount, nullable=False),
        sa.Column("preempted", amount, nullable=False),
        sa.Column("lost", amount, nullable=False),
        sa.Column("leases", sa.Integer(), nullable=False),
        sa.Column("starts", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("usage_rollup")
    for name in ("ix_leases_rolled_long", "ix_leases_unrolled", "ix_leases_granted"):
        op.drop_index(name, table_name="leases")
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("usage_rolled")

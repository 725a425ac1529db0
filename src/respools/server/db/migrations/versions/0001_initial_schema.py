"""Initial schema: definitions (pools, hosts, subjects, policies, reservations, tokens), requests,
leases and the event log with its outbox.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

LIVE = sa.text("state IN ('granted', 'active', 'preempting')")
PENDING = sa.text("state = 'pending'")


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _time() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _serial() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _event_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("id", _serial(), autoincrement=True, nullable=False),
        sa.Column("at", _time(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("pool", sa.String(63), nullable=True),
        sa.Column("subject", sa.String(63), nullable=True),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("lease_id", sa.String(64), nullable=True),
        sa.Column("message", sa.String(), nullable=False),
        sa.Column("data", _json(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    ]


def upgrade() -> None:
    op.create_table(
        "counters",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "meta",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "subjects",
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("display_name", sa.String(), nullable=True),
        sa.Column("labels", _json(), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "pools",
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("spec", _json(), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.Column("updated_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "hosts",
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("host", _json(), nullable=False),
        sa.Column("registered_at", _time(), nullable=False),
        sa.Column("last_seen_at", _time(), nullable=False),
        sa.Column("expires_at", _time(), nullable=False),
        sa.Column("lost", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("pool", "name"),
    )
    op.create_table(
        "policies",
        sa.Column("subject", sa.String(63), nullable=False),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("spec", _json(), nullable=False),
        sa.Column("updated_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("subject", "pool"),
    )
    op.create_index("ix_policies_pool", "policies", ["pool"])
    op.create_table(
        "reservations",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("subject", sa.String(63), nullable=False),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("spec", _json(), nullable=False),
        sa.Column("end_at", _time(), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_reservations_end_at", "reservations", ["end_at"])
    op.create_index("ix_reservations_pool", "reservations", ["pool"])
    op.create_index("ix_reservations_subject", "reservations", ["subject"])
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("subject", sa.String(63), nullable=True),
        sa.Column("description", sa.String(), nullable=True),
        sa.Column("created_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_index("ix_tokens_subject", "tokens", ["subject"])
    op.create_table(
        "requests",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("subject", sa.String(63), nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("spec", _json(), nullable=False),
        sa.Column("submitted_at", _time(), nullable=False),
        sa.Column("queued_at", _time(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("wait_reason", sa.String(32), nullable=True),
        sa.Column("wait_pool", sa.String(63), nullable=True),
        sa.Column("queue_position", sa.Integer(), nullable=True),
        sa.Column("nominated_pool", sa.String(63), nullable=True),
        sa.Column("lease_id", sa.String(64), nullable=True),
        sa.Column("updated_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("subject", "idempotency_key", name="uq_requests_idempotency"),
    )
    op.create_index("ix_requests_pending", "requests", ["submitted_at"], postgresql_where=PENDING, sqlite_where=PENDING)
    op.create_index("ix_requests_subject_submitted", "requests", ["subject", "submitted_at"])
    op.create_table(
        "leases",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("subject", sa.String(63), nullable=False),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("stack", sa.String(63), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("resources", _json(), nullable=False),
        sa.Column("borrowed", _json(), nullable=False),
        sa.Column("placement", _json(), nullable=False),
        sa.Column("preemptible", sa.Boolean(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("labels", _json(), nullable=False),
        sa.Column("granted_at", _time(), nullable=False),
        sa.Column("started_at", _time(), nullable=True),
        sa.Column("expires_at", _time(), nullable=False),
        sa.Column("max_runtime_s", sa.Float(), nullable=True),
        sa.Column("preempt_reason", sa.String(32), nullable=True),
        sa.Column("preempt_deadline", _time(), nullable=True),
        sa.Column("preempted_for", sa.String(64), nullable=True),
        sa.Column("released_at", _time(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_leases_live", "leases", ["pool"], postgresql_where=LIVE, sqlite_where=LIVE)
    op.create_index("ix_leases_request_id", "leases", ["request_id"])
    op.create_index("ix_leases_subject_granted", "leases", ["subject", "granted_at"])
    op.create_table("events", *_event_columns())
    op.create_index("ix_events_request", "events", ["request_id"])
    op.create_table("event_outbox", *_event_columns())


def downgrade() -> None:
    for name in (
        "event_outbox",
        "events",
        "leases",
        "requests",
        "tokens",
        "reservations",
        "policies",
        "hosts",
        "pools",
        "subjects",
        "meta",
        "counters",
    ):
        op.drop_table(name)

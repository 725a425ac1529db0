"""The store's tables, declared with SQLModel. Queries use SQLAlchemy Core over these tables (see
:func:`table`), because the reconciler's snapshot is the hot path and ORM identity tracking would only
cost time there.

Resource vectors are kept in integer units (milli-GPU) exactly as the scheduling core sees them; specs
that the API only ever returns whole are stored as one JSON document.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from respools.server.db.types import UtcDateTime, json_type

LIVE_STATES_SQL = "state IN ('granted', 'active', 'preempting')"
PENDING_SQL = "state = 'pending'"
UNROLLED_SQL = "usage_rolled = 0"
ROLLED_LONG_SQL = "usage_rolled = 2"


def _time(nullable: bool = False, index: bool = False) -> Any:
    return Field(sa_column=sa.Column(UtcDateTime(), nullable=nullable, index=index))


def _json(nullable: bool = False) -> Any:
    return Field(sa_column=sa.Column(json_type(), nullable=nullable))


class CounterRow(SQLModel, table=True):
    """Named counters; ``config`` is bumped by every change to pools, policies, reservations or hosts
    so that replicas know when to reload their cached definitions."""

    __tablename__ = "counters"
    name: str = Field(primary_key=True, max_length=64)
    value: int = Field(sa_type=sa.BigInteger, default=0)


class MetaRow(SQLModel, table=True):
    __tablename__ = "meta"
    key: str = Field(primary_key=True, max_length=64)
    value: str


class SubjectRow(SQLModel, table=True):
    __tablename__ = "subjects"
    name: str = Field(primary_key=True, max_length=63)
    display_name: str | None = None
    labels: dict[str, str] = _json()
    created_at: datetime = _time()


class PoolRow(SQLModel, table=True):
    __tablename__ = "pools"
    name: str = Field(primary_key=True, max_length=63)
    spec: dict[str, Any] = _json()
    created_at: datetime = _time()
    updated_at: datetime = _time()


class HostRow(SQLModel, table=True):
    """A host an agent reported for a pool; it counts in the pool's inventory until ``expires_at``."""

    __tablename__ = "hosts"
    pool: str = Field(primary_key=True, max_length=63)
    name: str = Field(primary_key=True, max_length=63)
    host: dict[str, Any] = _json()
    registered_at: datetime = _time()
    last_seen_at: datetime = _time()
    expires_at: datetime = _time()
    lost: bool = False


class PolicyRow(SQLModel, table=True):
    __tablename__ = "policies"
    subject: str = Field(primary_key=True, max_length=63)
    pool: str = Field(primary_key=True, max_length=63, index=True)
    spec: dict[str, Any] = _json()
    updated_at: datetime = _time()


class ReservationRow(SQLModel, table=True):
    __tablename__ = "reservations"
    id: str = Field(primary_key=True, max_length=64)
    subject: str = Field(max_length=63, index=True)
    pool: str = Field(max_length=63, index=True)
    spec: dict[str, Any] = _json()
    end_at: datetime = _time(index=True)
    created_at: datetime = _time()


class TokenRow(SQLModel, table=True):
    """A bearer token; only its SHA-256 is kept (tokens are random, so a slow hash buys nothing)."""

    __tablename__ = "tokens"
    id: str = Field(primary_key=True, max_length=64)
    token_hash: str = Field(max_length=64, unique=True)
    role: str = Field(max_length=16)
    subject: str | None = Field(default=None, max_length=63, index=True)
    description: str | None = None
    created_at: datetime = _time()
    lease_id: str | None = Field(default=None, max_length=64, index=True)
    """Set for a lease-scoped token: it may act on this lease only, and only while the lease is held."""


class RequestRow(SQLModel, table=True):
    """A request. ``spec`` holds what the step asked for; the columns hold what the service decided.
    ``queued_at`` is when it last entered the queue (submission or requeue), for grant latency;
    ``submitted_at`` never changes, so a requeued request keeps its place."""

    __tablename__ = "requests"
    __table_args__ = (
        sa.UniqueConstraint("subject", "idempotency_key", name="uq_requests_idempotency"),
        sa.Index(
            "ix_requests_pending",
            "submitted_at",
            postgresql_where=sa.text(PENDING_SQL),
            sqlite_where=sa.text(PENDING_SQL),
        ),
        sa.Index("ix_requests_subject_submitted", "subject", "submitted_at"),
    )
    id: str = Field(primary_key=True, max_length=64)
    subject: str = Field(max_length=63)
    idempotency_key: str | None = Field(default=None, max_length=200)
    state: str = Field(max_length=16)
    spec: dict[str, Any] = _json()
    submitted_at: datetime = _time()
    queued_at: datetime = _time()
    attempt: int = 0
    reason: str | None = None
    wait_reason: str | None = Field(default=None, max_length=32)
    wait_pool: str | None = Field(default=None, max_length=63)
    queue_position: int | None = None
    nominated_pool: str | None = Field(default=None, max_length=63)
    lease_id: str | None = Field(default=None, max_length=64)
    updated_at: datetime = _time()


class LeaseRow(SQLModel, table=True):
    __tablename__ = "leases"
    __table_args__ = (
        sa.Index(
            "ix_leases_live", "pool", postgresql_where=sa.text(LIVE_STATES_SQL), sqlite_where=sa.text(LIVE_STATES_SQL)
        ),
        sa.Index("ix_leases_subject_granted", "subject", "granted_at"),
        sa.Index("ix_leases_released", "released_at"),
        sa.Index("ix_leases_granted", "granted_at", "released_at"),
        sa.Index(
            "ix_leases_unrolled",
            "granted_at",
            postgresql_where=sa.text(UNROLLED_SQL),
            sqlite_where=sa.text(UNROLLED_SQL),
        ),
        sa.Index(
            "ix_leases_rolled_long",
            "released_at",
            postgresql_where=sa.text(ROLLED_LONG_SQL),
            sqlite_where=sa.text(ROLLED_LONG_SQL),
        ),
    )
    id: str = Field(primary_key=True, max_length=64)
    request_id: str = Field(max_length=64, index=True)
    subject: str = Field(max_length=63)
    pool: str = Field(max_length=63)
    stack: str = Field(max_length=63)
    state: str = Field(max_length=16)
    resources: dict[str, int] = _json()
    borrowed: dict[str, int] = _json()
    placement: dict[str, Any] = _json()
    preemptible: bool
    priority: int = 0
    attempt: int = 0
    labels: dict[str, str] = _json()
    granted_at: datetime = _time()
    grant_seq: int = 0
    started_at: datetime | None = _time(nullable=True)
    expires_at: datetime = _time()
    max_runtime_s: float | None = None
    preempt_reason: str | None = Field(default=None, max_length=32)
    preempt_deadline: datetime | None = _time(nullable=True)
    preempted_for: str | None = Field(default=None, max_length=64)
    overdue_since: datetime | None = _time(nullable=True)
    released_at: datetime | None = _time(nullable=True)
    checkpointed_at: datetime | None = _time(nullable=True)
    checkpoints: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    usage_rolled: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    """0 while the lease is not summed into ``usage_rollup`` (live, or ended since the last roll-up);
    1 once it is, 2 once it is and it was held longer than a day (see :mod:`respools.server.usage_rollup`)."""


class EventRow(SQLModel, table=True):
    """The event log. On PostgreSQL only the leader appends here (moving rows from the outbox), so ids
    become visible in order and ``GET /v1/events?after=`` never skips one."""

    __tablename__ = "events"
    __table_args__ = (sa.Index("ix_events_request", "request_id"),)
    id: int | None = Field(
        default=None,
        sa_column=sa.Column(sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    )
    at: datetime = _time()
    kind: str = Field(max_length=32)
    pool: str | None = Field(default=None, max_length=63)
    subject: str | None = Field(default=None, max_length=63)
    request_id: str | None = Field(default=None, max_length=64)
    lease_id: str | None = Field(default=None, max_length=64)
    message: str
    data: dict[str, Any] = _json()


class OutboxRow(SQLModel, table=True):
    """Events written by API transactions on PostgreSQL, waiting for the leader to sequence them."""

    __tablename__ = "event_outbox"
    id: int | None = Field(
        default=None,
        sa_column=sa.Column(sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    )
    at: datetime = _time()
    kind: str = Field(max_length=32)
    pool: str | None = Field(default=None, max_length=63)
    subject: str | None = Field(default=None, max_length=63)
    request_id: str | None = Field(default=None, max_length=64)
    lease_id: str | None = Field(default=None, max_length=64)
    message: str
    data: dict[str, Any] = _json()


ROLLUP_AMOUNT = sa.BigInteger().with_variant(sa.Numeric(38, 0), "postgresql")
"""Key-microseconds: exact integers; PostgreSQL's numeric never overflows, SQLite's 64-bit integers fail
loudly past 9.2e18 (a hundred million units held for a whole day in one subject and pool)."""


class UsageRollupRow(SQLModel, table=True):
    """Ended leases' usage pre-summed per hour and per day (``width``), subject, pool and key, in exact
    key-microseconds; the key ``""`` row of each bucket, subject and pool carries its lease counts (see
    :mod:`respools.server.usage_rollup`)."""

    __tablename__ = "usage_rollup"
    width: str = Field(primary_key=True, max_length=4)
    bucket: datetime = Field(sa_column=sa.Column(UtcDateTime(), primary_key=True))
    subject: str = Field(primary_key=True, max_length=63)
    pool: str = Field(primary_key=True, max_length=63)
    key: str = Field(primary_key=True, max_length=63)
    held: int = Field(sa_column=sa.Column(ROLLUP_AMOUNT, nullable=False))
    borrowed: int = Field(sa_column=sa.Column(ROLLUP_AMOUNT, nullable=False))
    preempted: int = Field(sa_column=sa.Column(ROLLUP_AMOUNT, nullable=False))
    lost: int = Field(sa_column=sa.Column(ROLLUP_AMOUNT, nullable=False))
    leases: int
    starts: int


def table(model: type[SQLModel]) -> sa.Table:
    """The Core table behind a SQLModel class."""
    return cast(sa.Table, vars(model)["__table__"])


METADATA = SQLModel.metadata
COUNTERS = table(CounterRow)
META = table(MetaRow)
SUBJECTS = table(SubjectRow)
POOLS = table(PoolRow)
HOSTS = table(HostRow)
POLICIES = table(PolicyRow)
RESERVATIONS = table(ReservationRow)
TOKENS = table(TokenRow)
REQUESTS = table(RequestRow)
LEASES = table(LeaseRow)
EVENTS = table(EventRow)
OUTBOX = table(OutboxRow)
USAGE_ROLLUP = table(UsageRollupRow)

"""The dashboard's reads of the store: plain queries over the service's tables, read-only.

The API's list endpoints page and filter for clients; the dashboard needs whole views at once (every
live lease, the whole queue with the pool each request waits on, the newest events first), so it reads
the tables itself rather than going through HTTP."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import sqlalchemy as sa

from respools.model import Event, EventKind, Lease, Request, Role
from respools.server.codec import event_of, lease_of, request_of
from respools.server.db.tables import EVENTS, LEASES, LIVE_STATES_SQL, PENDING_SQL, REQUESTS, TOKENS
from respools.server.schemas import Principal

HIDDEN_EVENT_KINDS = (EventKind.SUBMITTED.value,)
"""Submissions are the queue's business; the history shows what happened to requests."""


@dataclass(frozen=True, slots=True)
class Waiting:
    request: Request
    pool: str | None
    """The pool the scheduler last saw it waiting on (``None`` until its first cycle)."""


def live_leases(conn: sa.Connection, subject: str | None = None) -> list[Lease]:
    query = sa.select(LEASES).where(sa.text(LIVE_STATES_SQL)).order_by(LEASES.c.granted_at.desc(), LEASES.c.id)
    if subject is not None:
        query = query.where(LEASES.c.subject == subject)
    return [lease_of(row) for row in conn.execute(query).mappings()]


def waiting(conn: sa.Connection, subject: str | None = None) -> list[Waiting]:
    query = sa.select(REQUESTS).where(sa.text(PENDING_SQL)).order_by(REQUESTS.c.submitted_at, REQUESTS.c.id)
    if subject is not None:
        query = query.where(REQUESTS.c.subject == subject)
    return [Waiting(request_of(row), row["wait_pool"]) for row in conn.execute(query).mappings()]


def recent_events(conn: sa.Connection, limit: int, subject: str | None = None) -> list[Event]:
    """The newest ``limit`` events (submissions left out), newest first."""
    query = sa.select(EVENTS).where(EVENTS.c.kind.not_in(HIDDEN_EVENT_KINDS)).order_by(EVENTS.c.id.desc()).limit(limit)
    if subject is not None:
        query = query.where(EVENTS.c.subject == subject)
    return [event_of(row) for row in conn.execute(query).mappings()]


def queue_fingerprint(conn: sa.Connection) -> str:
    """A digest of the queue's decisions. The reconciler records positions and wait reasons without
    announcing them on the change bus, so open dashboards compare this instead."""
    rows = conn.execute(
        sa.select(
            REQUESTS.c.id, REQUESTS.c.wait_reason, REQUESTS.c.queue_position, REQUESTS.c.wait_pool, REQUESTS.c.reason
        )
        .where(sa.text(PENDING_SQL))
        .order_by(REQUESTS.c.id)
    )
    digest = hashlib.blake2b(digest_size=16)
    for row in rows:
        digest.update(repr(tuple(row)).encode())
    return digest.hexdigest()


def principal_by_token_id(conn: sa.Connection, token_id: str) -> Principal | None:
    """Who a token speaks for, by its id (what a session carries); ``None`` once it is revoked."""
    row = conn.execute(sa.select(TOKENS.c.id, TOKENS.c.role, TOKENS.c.subject).where(TOKENS.c.id == token_id)).first()
    if row is None:
        return None
    return Principal(token_id=row.id, role=Role(row.role), subject=row.subject)

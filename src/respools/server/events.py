"""The event log: appending (grants, rejections, preemptions, expiries, requeues, …) and reading.

On SQLite writers are serialized, so ids of ``events`` become visible in order. On PostgreSQL several
transactions commit concurrently and a plain sequence could make id 7 visible before id 6, which would
make ``GET /v1/events?after=6`` skip it forever. So API transactions append to ``event_outbox`` and the
reconciler leader — a single writer — moves outbox rows into ``events`` in each cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from respools.model import Event, EventKind
from respools.server.codec import event_of
from respools.server.db.database import Tx
from respools.server.db.statements import INSERT_EVENT, INSERT_OUTBOX
from respools.server.db.tables import EVENTS

_COLUMNS = ("at", "kind", "pool", "subject", "request_id", "lease_id", "message", "data")


def event_row(
    at: datetime,
    kind: EventKind,
    message: str,
    *,
    pool: str | None = None,
    subject: str | None = None,
    request_id: str | None = None,
    lease_id: str | None = None,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "at": at,
        "kind": kind.value,
        "pool": pool,
        "subject": subject,
        "request_id": request_id,
        "lease_id": lease_id,
        "message": message,
        "data": data or {},
    }


def append(tx: Tx, rows: Sequence[dict[str, Any]], *, sequencer: bool = False) -> None:
    """Record events in the current transaction. ``sequencer`` is true only for the reconciler leader,
    which may write to the log directly."""
    if not rows:
        return
    direct = sequencer or not tx.is_postgres
    tx.conn.execute(INSERT_EVENT if direct else INSERT_OUTBOX, list(rows))
    if direct:
        tx.changes.events = True
    else:
        tx.changes.wake = True  # the leader sequences the outbox in its next cycle


_COLUMN_LIST = ", ".join(_COLUMNS)
_DRAIN_OUTBOX = sa.text(
    f"WITH moved AS (DELETE FROM event_outbox RETURNING id, {_COLUMN_LIST}) "
    f"INSERT INTO events ({_COLUMN_LIST}) SELECT {_COLUMN_LIST} FROM moved ORDER BY id"
)
"""Built once: every cycle runs it, and parsing and cache-keying a fresh text clause cost more CPU
than PostgreSQL spends on an empty outbox."""


def drain_outbox(tx: Tx) -> int:
    """Move outbox rows into the log, in outbox order (leader only, PostgreSQL)."""
    result = tx.conn.execute(_DRAIN_OUTBOX)
    moved = result.rowcount or 0
    if moved:
        tx.changes.events = True
    return moved


def read(
    conn: sa.Connection,
    *,
    after: int = 0,
    limit: int = 100,
    kinds: Sequence[EventKind] = (),
    pool: str | None = None,
    subject: str | None = None,
    request_id: str | None = None,
    lease_id: str | None = None,
) -> list[Event]:
    query = sa.select(EVENTS).where(EVENTS.c.id > after).order_by(EVENTS.c.id).limit(limit)
    if kinds:
        query = query.where(EVENTS.c.kind.in_([k.value for k in kinds]))
    for column, value in (("pool", pool), ("subject", subject), ("request_id", request_id), ("lease_id", lease_id)):
        if value is not None:
            query = query.where(EVENTS.c[column] == value)
    return [event_of(row) for row in conn.execute(query).mappings()]


def last_id(conn: sa.Connection) -> int:
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(EVENTS.c.id), 0))).scalar_one())

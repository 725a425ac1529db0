"""Statements of the hot path, built once.

Building a Core statement and computing its cache key costs more CPU than SQLite takes to run it, and
a lease lifecycle runs a dozen of them; statements kept here are built at import, their cache keys
memoized on the objects, so each execution only binds parameters.
"""

from __future__ import annotations

import functools

import sqlalchemy as sa

from respools.server.db.tables import (
    COUNTERS,
    EVENTS,
    LEASES,
    METADATA,
    OUTBOX,
    PENDING_SQL,
    REQUESTS,
    SUBJECTS,
    TOKENS,
)

REQUEST_BY_ID = sa.select(REQUESTS).where(REQUESTS.c.id == sa.bindparam("k_id"))
REQUEST_BY_ID_LOCKED = REQUEST_BY_ID.with_for_update()
REQUESTS_BY_IDS = sa.select(REQUESTS).where(REQUESTS.c.id.in_(sa.bindparam("k_ids", expanding=True)))
REQUEST_STATES = sa.select(REQUESTS.c.id, REQUESTS.c.state).where(
    REQUESTS.c.id.in_(sa.bindparam("k_ids", expanding=True))
)
"""The states of a list of requests (``k_ids``): the long-polls' periodic recheck."""
REQUEST_BY_KEY = sa.select(REQUESTS).where(
    REQUESTS.c.subject == sa.bindparam("k_subject"), REQUESTS.c.idempotency_key == sa.bindparam("k_key")
)
KEYS_IN_USE = sa.select(REQUESTS.c.subject, REQUESTS.c.idempotency_key).where(
    sa.tuple_(REQUESTS.c.subject, REQUESTS.c.idempotency_key).in_(sa.bindparam("k_keys", expanding=True))
)
"""Which of a list of (subject, idempotency key) pairs (``k_keys``) name a request already."""
_SUBMITTED = ("id", "subject", "idempotency_key", "state", "spec", "submitted_at", "queued_at", "attempt", "updated_at")
_SUBJECT_EXISTS = sa.exists().where(SUBJECTS.c.name == sa.bindparam("subject"))
INSERT_REQUEST_OF_SUBJECT = (
    sa.insert(REQUESTS)
    .from_select(
        _SUBMITTED, sa.select(*(sa.bindparam(c, type_=REQUESTS.c[c].type) for c in _SUBMITTED)).where(_SUBJECT_EXISTS)
    )
    .execution_options(preserve_rowcount=True)  # SQLAlchemy counts an INSERT's rows only when asked
)
"""Queue a request, in the same statement checking that its subject exists: no row is inserted (rowcount
0) when it does not. Parameters: the column values, by column name."""
PENDING_REQUESTS = sa.select(REQUESTS).where(sa.text(PENDING_SQL)).order_by(REQUESTS.c.submitted_at)

LEASE_BY_ID = sa.select(LEASES).where(LEASES.c.id == sa.bindparam("k_id"))
LEASE_BY_ID_LOCKED = LEASE_BY_ID.with_for_update()
LEASES_BY_IDS = sa.select(LEASES).where(LEASES.c.id.in_(sa.bindparam("k_ids", expanding=True)))
LEASES_BY_IDS_LOCKED = (
    sa.select(LEASES)
    .where(LEASES.c.id.in_(sa.bindparam("k_ids", expanding=True)))
    .order_by(LEASES.c.id)
    .with_for_update()
)
"""Leases by a list of ids (``k_ids``), locked in id order."""
INSERT_LEASE = sa.insert(LEASES)
INSERT_EVENT = sa.insert(EVENTS)
INSERT_OUTBOX = sa.insert(OUTBOX)

SUBJECT_EXISTS = sa.select(SUBJECTS.c.name).where(SUBJECTS.c.name == sa.bindparam("k_name"))
TOKEN_BY_HASH = sa.select(TOKENS.c.id, TOKENS.c.role, TOKENS.c.subject, TOKENS.c.lease_id).where(
    TOKENS.c.token_hash == sa.bindparam("k_hash")
)
COUNTER_VALUE = sa.select(COUNTERS.c.value).where(COUNTERS.c.name == sa.bindparam("k_name"))


@functools.cache
def update_by_id(table_name: str, columns: tuple[str, ...]) -> sa.Update:
    """``UPDATE table SET <columns> WHERE id = :k_id``; parameters are ``v_<column>`` and ``k_id``."""
    table = METADATA.tables[table_name]
    return (
        sa.update(table)
        .where(table.c.id == sa.bindparam("k_id"))
        .values({c: sa.bindparam(f"v_{c}", type_=table.c[c].type) for c in columns})
    )


@functools.cache
def update_by_ids(table_name: str, columns: tuple[str, ...]) -> sa.Update:
    """``UPDATE table SET <columns> WHERE id IN :k_ids``: the same values on several rows, in one
    statement; parameters are ``v_<column>`` and ``k_ids`` (a list)."""
    table = METADATA.tables[table_name]
    return (
        sa.update(table)
        .where(table.c.id.in_(sa.bindparam("k_ids", expanding=True)))
        .values({c: sa.bindparam(f"v_{c}", type_=table.c[c].type) for c in columns})
    )

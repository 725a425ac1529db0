"""The leader's copy of the live leases, brought up to date each cycle by reading only what can change.

A grant fixes most of a lease's row for good (who, where, how much, which devices, its labels); what moves
afterwards is a handful of scalar columns: its state, expiry, notice, checkpoints. Reading and decoding
every live lease in full every cycle (JSON columns parsed, models built) cost the leader most of a core at
10,000 held leases, and its thread held the GIL that the same worker's HTTP event loop needs, so every
heartbeat answered by that worker waited behind it (issue 25). Each cycle now reads the changing columns
of every live lease, reads whole rows only for the leases it has not seen, and builds a model again only
for the leases whose changing columns moved, mostly the renewals of the last flush.

The copy is only ever a cache of what this cycle read: a lease is taken from it only when the columns
just read equal those it was built from, and the columns it keeps are those no statement changes after
the grant (:data:`FIXED_AT_GRANT`; a test runs a lease through its life and checks it). Lease ids are
never reused, so the copy stays right across lost and regained leadership.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from respools.model import Lease, PreemptReason, RequestState
from respools.server.codec import construct, lease_of
from respools.server.db.tables import LEASES, LIVE_STATES_SQL

FIXED_AT_GRANT = frozenset(
    {
        "request_id",
        "subject",
        "pool",
        "stack",
        "resources",
        "borrowed",
        "placement",
        "preemptible",
        "priority",
        "attempt",
        "labels",
        "granted_at",
        "grant_seq",
        "max_runtime_s",
    }
)
"""Columns written once, when the reconciler inserts the lease."""

CHANGING = tuple(
    column.name for column in LEASES.c if column.name in Lease.model_fields and column.name not in FIXED_AT_GRANT
)
"""What each cycle reads of every live lease: the id, then every model field that may move after the
grant (a column added later is read here unless it is listed as fixed)."""

LIVE_CHANGING = sa.select(*(LEASES.c[name] for name in CHANGING)).where(sa.text(LIVE_STATES_SQL))
LEASES_BY_ID = sa.select(LEASES).where(LEASES.c.id.in_(sa.bindparam("ids", expanding=True)))
UNSEEN_CHUNK = 1000
"""Whole rows read per statement for leases not seen before (a new leader reads them all)."""

_ENUMS = {"state": RequestState, "preempt_reason": PreemptReason}


class LiveLeases:
    """What the last cycle knew of each live lease: the changing columns it read, and the model built."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[Sequence[Any], Lease]] = {}

    def __len__(self) -> int:
        return len(self._known)

    def load(self, conn: sa.Connection) -> list[Lease]:
        """Every live lease as of this read, in the order the database returned them."""
        rows = conn.execute(LIVE_CHANGING).all()
        known = self._known
        current: dict[str, tuple[Sequence[Any], Lease]] = {}
        unseen: dict[str, Sequence[Any]] = {}
        for row in rows:
            lease_id = row[0]
            entry = known.get(lease_id)
            if entry is None:
                unseen[lease_id] = row
            elif entry[0] == row:
                current[lease_id] = entry
            else:
                current[lease_id] = (row, _moved(entry[1], row))
        for lease in _read_whole(conn, unseen):
            # The whole row may be newer than the changing columns read above (another transaction may
            # have committed in between): the lease is built as of the first read, so that this cycle's
            # view is one read, and a later move is seen by the next cycle's comparison.
            first = unseen[lease.id]
            current[lease.id] = (first, lease if _agrees(lease, first) else _moved(lease, first))
        self._known = current
        return [current[row[0]][1] for row in rows if row[0] in current]


def _read_whole(conn: sa.Connection, ids: Iterable[str]) -> list[Lease]:
    wanted = list(ids)
    leases: list[Lease] = []
    for start in range(0, len(wanted), UNSEEN_CHUNK):
        chunk = wanted[start : start + UNSEEN_CHUNK]
        leases += (lease_of(row) for row in conn.execute(LEASES_BY_ID, {"ids": chunk}).mappings().all())
    return leases


def _agrees(lease: Lease, row: Sequence[Any]) -> bool:
    fields = lease.__dict__
    return all(fields[name] == value for name, value in zip(CHANGING, row, strict=True))


def _moved(lease: Lease, row: Sequence[Any]) -> Lease:
    values = dict(lease.__dict__)
    for name, value in zip(CHANGING, row, strict=True):
        enum = _ENUMS.get(name)
        values[name] = enum(value) if enum is not None and value is not None else value
    return construct(Lease, values)

"""The leader's copy of the live leases, brought up to date each cycle by reading only what can change.

A grant fixes most of a lease's row for good (who, where, how much, which devices, its labels); what moves
afterwards is a handful of scalar columns: its state, expiry, notice, checkpoints. Reading and decoding
every live lease in full every cycle (JSON columns parsed, models built) cost the leader 0.7 s of CPU per
cycle at 10,000 held leases, every tick, in a thread of an HTTP worker (issue 25). Each cycle now reads
the changing columns of every live lease, reads whole rows only for the leases it has not seen, and
builds a model again only for the leases whose changing columns moved, mostly the renewals of the last
flush.

The copy is only ever a cache of what this cycle read: a lease is taken from it only when the columns
just read equal those it was built from, and the columns it keeps are those no statement changes after
the grant (:data:`FIXED_AT_GRANT`; a test runs a lease through its life and checks it). Lease ids are
never reused, so the copy stays right across lost and regained leadership.

The copy also keeps the live leases summed per pool and subject (:class:`~respools.scheduling.books.KeptLeases`),
brought up to date with the few leases that came, went or moved, and hands the sums to the core
(``Snapshot.books``): charging every live lease to its subject anew was most of what was left of the
cycle's CPU at 10,000 held leases (~6 µs a lease), and it is the leader's alone, so it bounds how many
leases all replicas together can hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from respools.model import Lease, PreemptReason, RequestState
from respools.scheduling.books import KeptLeases
from respools.scheduling.state import LeaseBooks
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
"""Read through the driver's own cursor (:func:`_driver_rows`): plain tuples, compared as the driver gives
them, and converted to Python values only for a lease whose columns moved."""
LEASES_BY_ID = sa.select(LEASES).where(LEASES.c.id.in_(sa.bindparam("ids", expanding=True)))
UNSEEN_CHUNK = 1000
"""Whole rows read per statement for leases not seen before (a new leader reads them all)."""

_ENUMS = {"state": RequestState, "preempt_reason": PreemptReason}


class LiveLeases:
    """What the last cycle knew of each live lease: the changing columns it read, and the model built."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[Sequence[Any], Lease]] = {}
        self._decoders: _Decoders | None = None
        self._books = KeptLeases()

    def _forget(self) -> None:
        self._known, self._books = {}, KeptLeases()

    def __len__(self) -> int:
        return len(self._known)

    def load(self, conn: sa.Connection) -> list[Lease]:
        """Every live lease as of this read, in the order the database returned them."""
        try:
            return self._load(conn)
        except BaseException:
            self._forget()  # half brought up to date: the next read starts afresh
            raise

    def _load(self, conn: sa.Connection) -> list[Lease]:
        rows = _driver_rows(conn)
        decoders = self._decoders
        if decoders is None or decoders.dialect is not conn.dialect:
            decoders = self._decoders = _Decoders(conn.dialect)
        known, books = self._known, self._books
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
                current[lease_id] = entry = (row, _moved(entry[1], decoders.values(row)))
                books.changed(entry[1])
        if len(current) < len(known):  # some ended
            for lease_id in known.keys() - current.keys():
                books.discard(lease_id)
        for lease in _read_whole(conn, unseen):
            # The whole row may be newer than the changing columns read above (another transaction may
            # have committed in between): the lease is built as of the first read, so that this cycle's
            # view is one read, and a later move is seen by the next cycle's comparison.
            first = unseen[lease.id]
            values = decoders.values(first)
            current[lease.id] = entry = (first, lease if _agrees(lease, values) else _moved(lease, values))
            books.add(entry[1])
        self._known = current
        # A live lease is never deleted, so each id read has its entry; were one missing, the KeyError
        # fails the cycle rather than leaving the lease (and the devices it holds) out of the snapshot.
        return [current[row[0]][1] for row in rows]

    def books(self, now: datetime) -> LeaseBooks | None:
        """The leases of the last :meth:`load`, summed for a cycle at ``now`` (None when one of them may
        have expired by then: that cycle sums them itself, as it must to expire them)."""
        return self._books.books(now)


def _driver_rows(conn: sa.Connection) -> list[tuple[Any, ...]]:
    """The changing columns of every live lease, as the DBAPI driver returns them.

    SQLAlchemy's rows and result types cost most of reading ten thousand leases each cycle (a
    ``Row`` per lease, six timestamps normalized per row), and almost every row is compared and dropped
    unchanged. The statement runs on the transaction's own connection, so it sees what the rest of the
    cycle sees."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        sql = _COMPILED.get(conn.dialect.name)
        if sql is None:
            sql = _COMPILED[conn.dialect.name] = str(LIVE_CHANGING.compile(dialect=conn.dialect))
        cursor.execute(sql)
        return list(cursor.fetchall())
    finally:
        cursor.close()


_COMPILED: dict[str, str] = {}
""":data:`LIVE_CHANGING` in each dialect's SQL (it has no parameters)."""


class _Decoders:
    """The result processing SQLAlchemy would apply to each changing column (timestamps to aware UTC
    datetimes on both stores), applied to the few rows that moved."""

    def __init__(self, dialect: sa.Dialect) -> None:
        self.dialect = dialect
        self._processors = [
            LEASES.c[name].type.dialect_impl(dialect).result_processor(dialect, None) for name in CHANGING
        ]

    def values(self, row: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(
            value if process is None else process(value) for process, value in zip(self._processors, row, strict=True)
        )


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

"""The usage roll-up: ended leases summed ahead of time per hour and per day, subject and pool.

A usage query over a month used to cut every lease of the month into its buckets on each read (seconds
on a busy history, see ``benchmarks/usage_query.py``). Here each lease is cut and summed once, after it
ended, into ``usage_rollup`` (exact integer key-microseconds, one row per key), and
``leases.usage_rolled`` is set in the same transaction. Which leases are rolled up is thus recorded per
lease, not as a time watermark: a lease that ends late, a lease that was running when its buckets
closed, a row written with past times — each is summed on read until it is rolled up, and from then on
only from the roll-up; never both, never neither (:mod:`usage_query` reads both sides in one snapshot).

Only leases in an end state are rolled up: nothing changes an ended lease's row afterwards (a
checkpoint report needs a live lease), so its sums are final.

Who writes: the reconciler's leader (:class:`RollupWorker`), every ``usage_rollup_s``. Correctness does
not depend on it being the only one: on PostgreSQL each batch first takes a transaction-level advisory
lock, so batches never interleave, and in READ COMMITTED each statement after the lock sees the previous
batch's commit; on SQLite writers are serialized anyway. A crash mid-batch rolls the batch back whole:
the sums and the marks commit together or not at all. The marking ``UPDATE`` also checks that every
lease it marks was still unmarked, and fails the batch otherwise.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from respools.model import LIVE_LEASE_STATES
from respools.server.db.database import Database, Tx
from respools.server.db.tables import UNROLLED_SQL, USAGE_ROLLUP
from respools.server.usage import (
    DAY,
    INTERVAL_COLUMNS,
    LEASES,
    Dimension,
    Ledger,
    Sums,
    as_interval,
)

log = logging.getLogger(__name__)

WIDTHS = {"hour": Dimension.HOUR, "day": Dimension.DAY}
LONG = DAY
"""A rolled-up lease held longer than this is marked ``ROLLED_LONG``: a query finds the rolled-up leases
on its window's ragged edges by grant time within ``LONG`` before the edge, and the long ones through
their own index."""
ROLLED_SHORT, ROLLED_LONG = 1, 2
BATCH = 5000
CHUNK = 500
ANALYZE_AFTER = 50_000
"""After rolling up this many leases at once (an upgraded history), PostgreSQL's statistics still say
most leases are not rolled up, and the planner would read the whole table for the few that are not;
the leader then analyzes ``leases`` rather than waiting for autovacuum."""
"""Keys per statement where a batch names rows (SQLite bounds the parameters of one statement)."""
LOCK_KEY = 0x7265_7370_7573_6167  # "respusag": one fixed bigint per database
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
CellKey = tuple[str, datetime, str, str]
T = TypeVar("T")


def _chunks(items: list[T]) -> list[list[T]]:
    return [items[i : i + CHUNK] for i in range(0, len(items), CHUNK)]


def roll_up(tx: Tx, limit: int = BATCH, granted_from: datetime | None = None) -> list[datetime]:
    """Sum up to ``limit`` ended, not yet rolled-up leases (granted at ``granted_from`` or later, when
    given) into the roll-up and mark them; returns their grant times, in order (fewer than ``limit``:
    none are left)."""
    conn = tx.conn
    if tx.is_postgres:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
    rows = conn.execute(
        sa.select(*INTERVAL_COLUMNS)
        .where(
            sa.text(UNROLLED_SQL),
            LEASES.c.released_at.is_not(None),
            LEASES.c.state.not_in([s.value for s in LIVE_LEASE_STATES]),
            LEASES.c.granted_at >= (granted_from or EPOCH),
        )
        .order_by(LEASES.c.granted_at)
        .limit(limit)
    ).all()
    if not rows:
        return []
    leases = [as_interval(row, tx.now) for row in rows]
    cells: dict[CellKey, Sums] = {}
    for name, dimension in WIDTHS.items():
        ledger = Ledger([Dimension.SUBJECT, Dimension.POOL, dimension], EPOCH)
        for lease in leases:
            ledger.add_interval(lease, lease.start, lease.end)
        for (subject, pool, bucket), sums in ledger.groups.items():
            cells[(name, bucket, subject, pool)] = sums
    _merge(conn, cells)
    marks: dict[int, list[str]] = {ROLLED_SHORT: [], ROLLED_LONG: []}
    for row, lease in zip(rows, leases, strict=True):
        marks[ROLLED_LONG if lease.end - lease.start > LONG else ROLLED_SHORT].append(row.id)
    marked = 0
    for mark, ids in marks.items():
        for chunk in [ids] if tx.is_postgres else _chunks(ids):
            named = (
                LEASES.c.id == sa.any_(sa.bindparam("ids", chunk, type_=ARRAY(sa.String)))
                if tx.is_postgres
                else LEASES.c.id.in_(chunk)
            )
            update = LEASES.update().where(named, sa.text(UNROLLED_SQL)).values(usage_rolled=mark)
            marked += conn.execute(update).rowcount
    if marked != len(rows):
        raise RuntimeError(f"usage roll-up: marked {marked} of {len(rows)} leases; another writer raced it")
    return [lease.start for lease in leases]


COUNTS_KEY = ""
"""The key of the row that carries a bucket's lease counts (its amounts are 0); no pool key is empty."""


def _rows(cells: dict[CellKey, Sums]) -> list[dict[str, Any]]:
    rows = []
    for (width, bucket, subject, pool), sums in cells.items():
        cell = {"width": width, "bucket": bucket, "subject": subject, "pool": pool}
        rows.append(
            cell
            | {"key": COUNTS_KEY, "held": 0, "borrowed": 0, "preempted": 0, "lost": 0}
            | {"leases": sums.leases, "starts": sums.starts}
        )
        for key in sums.held.keys() | sums.borrowed.keys():
            amounts = {
                "held": sums.held.get(key, 0),
                "borrowed": sums.borrowed.get(key, 0),
                "preempted": sums.preempted.get(key, 0),
                "lost": sums.lost.get(key, 0),
            }
            rows.append(cell | {"key": key} | amounts | {"leases": 0, "starts": 0})
    return rows


def _merge(conn: sa.Connection, cells: dict[CellKey, Sums]) -> None:
    """Add ``cells`` to the roll-up: one upsert that adds to the rows of the same keys."""
    insert = (pg_insert if conn.dialect.name == "postgresql" else sqlite_insert)(USAGE_ROLLUP)
    added = {
        name: USAGE_ROLLUP.c[name] + insert.excluded[name]
        for name in ("held", "borrowed", "preempted", "lost", "leases", "starts")
    }
    statement = insert.on_conflict_do_update(index_elements=list(USAGE_ROLLUP.primary_key.columns), set_=added)
    conn.execute(statement, _rows(cells))


def catch_up(db: Database, limit: int = BATCH) -> int:
    """Roll up every ended lease not rolled up yet, one transaction per ``limit`` leases, in grant
    order; each batch starts at the last one's latest grant, so it does not walk again through the
    index entries of the leases just marked (until vacuum removes them). A lease granted earlier that
    ends meanwhile is left for the next call."""
    total, granted_from = 0, None
    while True:
        granted = db.write(lambda tx: roll_up(tx, limit, granted_from))  # noqa: B023
        total += len(granted)
        if len(granted) < limit:
            return total
        granted_from = granted[-1]


class RollupWorker:
    """A thread that, while ``leading()``, catches the roll-up up every ``interval_s``.

    Only the reconciler's leader rolls up, so replicas do not queue on the lock for nothing; a follower
    that briefly still believes it leads is harmless (see the module's docstring)."""

    def __init__(self, db: Database, leading: Callable[[], bool], interval_s: float) -> None:
        self._db = db
        self._leading = leading
        self._interval_s = interval_s
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="respools-usage-rollup", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            if not self._leading():
                continue
            try:
                rolled = catch_up(self._db)
                if rolled >= ANALYZE_AFTER and self._db.is_postgres:
                    self._db.write(lambda tx: tx.conn.execute(sa.text("ANALYZE leases")))
            except Exception:
                log.exception("usage roll-up failed; retrying in %.0f s", self._interval_s)
                continue
            if rolled:
                log.debug("rolled up ended leases", extra={"leases": rolled})

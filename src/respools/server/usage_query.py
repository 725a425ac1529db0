"""Usage queries: the roll-up's pre-summed buckets plus, summed on read, what it does not hold.

For a window ``[since, until)`` grouped by ``by``, one snapshot reads:

* the roll-up rows (:mod:`usage_rollup`) of the whole days inside the window (for hourly groups: the
  whole hours), and of the whole hours inside the ragged parts left at either end;
* the rolled-up leases overlapping what is left at the ends, under an hour each (found by grant time,
  at most a day back, or for the few leases held longer than a day through their own index);
* every lease not rolled up yet that overlaps the window: the live ones, and those ended since the
  leader's last roll-up.

All three feed one :class:`usage.Ledger`, with the same exact integer arithmetic as the direct
computation (:func:`usage.aggregate` over every lease), so the answer is the same figure whichever
leases happen to be rolled up, on every replica. The cost is bounded by the number of buckets and of
live leases, not by the leases of the window.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from respools.server.db.tables import ROLLED_LONG_SQL, UNROLLED_SQL, USAGE_ROLLUP
from respools.server.usage import (
    DAY,
    HOUR,
    INTERVAL_COLUMNS,
    LEASES,
    Dimension,
    Ledger,
    Totals,
    ceil,
    floor,
    overlapping,
    read_intervals,
    width_of,
)
from respools.server.usage_rollup import LONG, ROLLED_SHORT

WIDTH_NAMES = {HOUR: "hour", DAY: "day"}
Span = tuple[timedelta, datetime, datetime]


def split(
    since: datetime, until: datetime, widths: Sequence[timedelta]
) -> tuple[list[Span], list[tuple[datetime, datetime]]]:
    """``[since, until)`` as whole buckets of the widest width that fits, then of the next width in the
    ragged ends, and so on; returns those spans and the ends no width covers."""
    if since >= until:
        return [], []
    if not widths:
        return [], [(since, until)]
    width, rest = widths[0], widths[1:]
    first, last = ceil(since, width), floor(until, width)
    if first >= last:
        return split(since, until, rest)
    head_spans, head_edges = split(since, first, rest)
    tail_spans, tail_edges = split(last, until, rest)
    return [*head_spans, (width, first, last), *tail_spans], head_edges + tail_edges


@contextmanager
def snapshot(conn: sa.Connection) -> Iterator[None]:
    """One consistent view for the whole query, so a roll-up committing meanwhile is seen entirely or
    not at all. SQLite's read transaction is one already; PostgreSQL's read connections autocommit, so
    a read-only REPEATABLE READ transaction is opened (unless the caller is inside one of its own)."""
    dbapi = conn.connection.dbapi_connection
    info = getattr(dbapi, "info", None)
    if conn.dialect.name != "postgresql" or info is None or info.transaction_status != 0:  # 0: IDLE
        yield
        return
    conn.exec_driver_sql("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        yield
    finally:
        conn.exec_driver_sql("ROLLBACK")


def _group_spans(span: Span, width: timedelta | None) -> list[Span]:
    """``span`` cut where the grouping's buckets change, when they are wider than its own (hours of a
    window grouped by day); else whole."""
    span_width, start, end = span
    if width is None or width == span_width:
        return [span]
    cuts = [start]
    while (nxt := floor(cuts[-1], width) + width) < end:
        cuts.append(nxt)
    return [(span_width, a, b) for a, b in zip(cuts, [*cuts[1:], end], strict=True)]


def _rolled_up(ledger: Ledger, conn: sa.Connection, span: Span, subject: str | None) -> None:
    """The roll-up's rows of ``span``, summed in the database into the ledger's groups. Where the
    span's buckets are the grouping's, each is its own group and counts all its leases; else the
    span lies in one group, which counts, besides the leases granted in each bucket (``starts``), all
    those of the bucket the group starts at."""
    width, start, end = span
    c = USAGE_ROLLUP.c
    per_bucket = ledger.width == width
    group_bucket = None if ledger.width is None else floor(start, ledger.width)
    first = ledger.since if group_bucket is None else max(group_bucket, ledger.since)
    counted = c.leases if per_bucket else sa.case((c.bucket == first, c.leases), else_=c.starts)
    # grouped by the dimensions asked for only: pools summed in the database when only subjects are
    subject_column = c.subject if Dimension.SUBJECT in ledger.by else sa.null()
    pool_column = c.pool if Dimension.POOL in ledger.by else sa.null()
    # the bucket as stored (SQLite: text), parsed once per distinct value below rather than per row
    bucket_column = sa.type_coerce(c.bucket, sa.String) if per_bucket else sa.null()
    grouped = [column for column in (c.subject, c.pool) if column in (subject_column, pool_column)]
    query = (
        sa.select(
            subject_column,
            pool_column,
            bucket_column,
            c.key,
            sa.func.sum(c.held),
            sa.func.sum(c.borrowed),
            sa.func.sum(c.preempted),
            sa.func.sum(c.lost),
            sa.func.sum(counted),
        )
        .where(c.width == WIDTH_NAMES[width], c.bucket >= start, c.bucket < end)
        .group_by(*grouped, c.key, *([c.bucket] if per_bucket else []))
    )
    if subject is not None:
        query = query.where(c.subject == subject)
    buckets: dict[Any, datetime] = {}
    for row_subject, row_pool, stored, key, *amounts, leases in conn.execute(query).tuples():
        bucket = group_bucket
        if per_bucket:
            bucket = buckets.get(stored) or buckets.setdefault(stored, _as_bucket(stored))
        ledger.add_amounts(row_subject, row_pool, bucket, key, amounts, int(leases))


def _as_bucket(stored: datetime | str) -> datetime:
    at = datetime.fromisoformat(stored) if isinstance(stored, str) else stored
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def _rolled_up_leases(
    ledger: Ledger, conn: sa.Connection, start: datetime, end: datetime, now: datetime, subject: str | None
) -> None:
    short = sa.select(*INTERVAL_COLUMNS).where(
        LEASES.c.usage_rolled == ROLLED_SHORT,
        LEASES.c.granted_at >= start - LONG,
        LEASES.c.granted_at < end,
        LEASES.c.released_at > start,
    )
    long = sa.select(*INTERVAL_COLUMNS).where(
        sa.text(ROLLED_LONG_SQL), LEASES.c.released_at > start, LEASES.c.granted_at < end
    )
    for query in (short, long):
        for lease in read_intervals(conn, query, now, subject):
            ledger.add_interval(lease, start, end)


def usage_totals(
    conn: sa.Connection,
    since: datetime,
    until: datetime,
    now: datetime,
    subject: str | None,
    by: Sequence[Dimension],
) -> dict[tuple[Any, ...], Totals]:
    """The ledger's sums over ``[since, until)`` grouped by ``by``: what :func:`usage.aggregate` answers
    for every lease overlapping the window, a live one counted up to ``now``."""
    ledger = Ledger(by, since)
    widths = [HOUR] if width_of(by) == HOUR else [DAY, HOUR]
    spans, edges = split(since, until, widths)
    with snapshot(conn):
        for span in spans:
            for part in _group_spans(span, ledger.width):
                _rolled_up(ledger, conn, part, subject)
        for start, end in edges:
            _rolled_up_leases(ledger, conn, start, end, now, subject)
        unrolled = sa.select(*INTERVAL_COLUMNS).where(sa.text(UNROLLED_SQL), overlapping(since, until))
        for lease in read_intervals(conn, unrolled, now, subject):
            ledger.add_interval(lease, since, until)
    return ledger.totals()

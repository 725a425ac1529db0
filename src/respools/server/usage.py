"""The usage ledger: key-seconds per subject, pool and time bucket, from lease rows.

Every lease row carries its subject, pool, resources, borrowed part, ``granted_at`` and (once it ended)
``released_at`` and final state, written in the transaction that moved it. Summing their intervals,
clipped to the window and its buckets, gives the same answer on every replica and after any restart
(see docs/decisions.md, "Usage is computed on read"). A lease still running counts up to ``now``.
Ended leases are also summed ahead of time into closed-bucket totals (:mod:`usage_rollup`); a query adds
those to the leases not yet summed (:mod:`usage_query`), and both sides use the arithmetic here.

Sums are exact: integer key-microseconds (:class:`Sums`), so adding them in any order, per lease or per
pre-summed bucket, gives the same figure to the last digit; they become key-seconds only at the end.

Preempted work splits in two: all the time a preempted lease held (``preempted``), and the part since
its holder's last checkpoint report (``lost``: ``checkpointed_at`` on the row, set by ``POST
/v1/leases/{id}/checkpoint``; from the grant when it reported none) — the work a rerun must redo.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from respools.model import RequestState
from respools.server.db.tables import LeaseRow, table

LEASES = table(LeaseRow)
MICROSECOND = timedelta(microseconds=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
GroupKey = tuple[Any, ...]


class Dimension(StrEnum):
    SUBJECT = "subject"
    POOL = "pool"
    DAY = "day"
    HOUR = "hour"


@dataclass(frozen=True, slots=True)
class Interval:
    """One lease's held resources over ``[start, end)``; ``borrowed`` is the part above its share."""

    subject: str
    pool: str
    resources: dict[str, int]
    borrowed: dict[str, int]
    start: datetime
    end: datetime
    preempted: bool
    checkpointed_at: datetime | None = None
    """The holder's last checkpoint report; a preemption loses the work after it."""

    @property
    def lost_from(self) -> datetime:
        """Where the lost work of a preempted lease starts: its last checkpoint, else its grant."""
        return max(self.start, self.checkpointed_at) if self.checkpointed_at is not None else self.start


@dataclass(slots=True)
class Totals:
    """Key-seconds in the scheduling core's units (milli-GPU for ``gpu``) for one group."""

    in_share: dict[str, float] = field(default_factory=dict)
    borrowed: dict[str, float] = field(default_factory=dict)
    preempted: dict[str, float] = field(default_factory=dict)
    lost: dict[str, float] = field(default_factory=dict)
    """Of ``preempted``: the part since the lease's last checkpoint (all of it without one)."""
    leases: int = 0


def _add(into: dict[str, int], vector: dict[str, int], times: int = 1) -> None:
    for key, amount in vector.items():
        into[key] = into.get(key, 0) + amount * times


def _seconds(vector: dict[str, int], nonzero: bool = True) -> dict[str, float]:
    return {k: v / 1_000_000 for k, v in vector.items() if v or not nonzero}


@dataclass(slots=True)
class Sums:
    """Exact key-microseconds of one group: ``held`` (all of it; in share is held minus borrowed),
    ``borrowed``, ``preempted``, ``lost``. ``leases`` counts the leases of the group; ``starts``, the
    pieces that begin at their lease's grant (what a pre-summed bucket needs to count a lease once
    across several buckets, see :mod:`usage_query`)."""

    held: dict[str, int] = field(default_factory=dict)
    borrowed: dict[str, int] = field(default_factory=dict)
    preempted: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    leases: int = 0
    starts: int = 0

    def add(self, other: Sums, leases: int) -> None:
        _add(self.held, other.held)
        _add(self.borrowed, other.borrowed)
        _add(self.preempted, other.preempted)
        _add(self.lost, other.lost)
        self.leases += leases
        self.starts += other.starts

    def totals(self) -> Totals:
        in_share = dict(self.held)
        _add(in_share, self.borrowed, -1)
        return Totals(
            in_share=_seconds(in_share, nonzero=False),
            borrowed=_seconds(self.borrowed),
            preempted=_seconds(self.preempted),
            lost=_seconds(self.lost),
            leases=self.leases,
        )


def width_of(by: Sequence[Dimension]) -> timedelta | None:
    """The bucket width a grouping asks for: an hour, a day, or none (the whole window)."""
    return HOUR if Dimension.HOUR in by else DAY if Dimension.DAY in by else None


def floor(at: datetime, width: timedelta) -> datetime:
    """The UTC start of the day or hour ``at`` falls in."""
    start = at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return start.replace(hour=0) if width == DAY else start


def ceil(at: datetime, width: timedelta) -> datetime:
    start = floor(at, width)
    return start if start == at else start + width


def pieces(
    start: datetime, end: datetime, width: timedelta | None
) -> Iterator[tuple[datetime | None, datetime, datetime]]:
    """``[start, end)`` cut at bucket boundaries: (bucket start, piece start, piece end)."""
    if width is None:
        yield None, start, end
        return
    bucket = floor(start, width)
    while bucket < end:
        nxt = bucket + width
        yield bucket, max(start, bucket), min(end, nxt)
        bucket = nxt


class Ledger:
    """Groups keyed by ``by`` (in that order) over a window starting at ``since``, fed lease intervals
    (:meth:`add_interval`) and pre-summed amounts.

    A lease counts once per group: in the piece holding its first moment in the group (its grant, or
    the group's start when it was granted before). Feeding the window in parts — pre-summed buckets
    (:meth:`add_amounts`), the leases not summed yet, the window's ragged edges — thus counts each
    lease exactly as feeding it whole would."""

    def __init__(self, by: Sequence[Dimension], since: datetime) -> None:
        self.by = list(by)
        self.width = width_of(by)
        self.since = since
        self.groups: dict[GroupKey, Sums] = {}

    def _group(self, subject: str | None, pool: str | None, bucket: datetime | None) -> Sums:
        parts = {Dimension.SUBJECT: subject, Dimension.POOL: pool, Dimension.DAY: bucket, Dimension.HOUR: bucket}
        key = tuple(parts[d] for d in self.by)
        sums = self.groups.get(key)
        if sums is None:
            sums = self.groups[key] = Sums()
        return sums

    def _group_start(self, bucket: datetime | None) -> datetime:
        return self.since if bucket is None else max(bucket, self.since)

    def add_interval(self, lease: Interval, start: datetime, end: datetime) -> None:
        """``lease`` clipped to ``[start, end)`` (a part of the window)."""
        start, end = max(lease.start, start), min(lease.end, end)
        if end <= start:
            return
        lost_from = lease.lost_from
        for bucket, piece_start, piece_end in pieces(start, end, self.width):
            sums = self._group(lease.subject, lease.pool, bucket)
            if piece_start == max(lease.start, self._group_start(bucket)):
                sums.leases += 1
            if piece_start == lease.start:
                sums.starts += 1
            micros = (piece_end - piece_start) // MICROSECOND
            _add(sums.held, lease.resources, micros)
            _add(sums.borrowed, lease.borrowed, micros)
            if lease.preempted:
                _add(sums.preempted, lease.resources, micros)
                _add(sums.lost, lease.resources, max(0, (piece_end - max(piece_start, lost_from)) // MICROSECOND))

    def add_amounts(
        self,
        subject: str | None,
        pool: str | None,
        bucket: datetime | None,
        key: str,
        amounts: Sequence[int],
        leases: int,
    ) -> None:
        """Pre-summed key-microseconds of ``key`` (held, borrowed, preempted, lost) and ``leases`` more
        leases, into the group of ``bucket`` (a start of the grouping's buckets, or ``None``; ``subject``
        and ``pool`` may be ``None`` where the grouping has no such dimension); the caller
        counts each lease once (see :mod:`usage_query`). An empty ``key`` carries only the count."""
        sums = self._group(subject, pool, bucket)
        sums.leases += leases
        if not key:
            return
        for into, amount in zip((sums.held, sums.borrowed, sums.preempted, sums.lost), amounts, strict=True):
            into[key] = into.get(key, 0) + int(amount)

    def totals(self) -> dict[GroupKey, Totals]:
        return {key: sums.totals() for key, sums in self.groups.items()}


def aggregate(
    intervals: Iterable[Interval], since: datetime, until: datetime, by: Sequence[Dimension]
) -> dict[GroupKey, Totals]:
    """Sum each interval clipped to ``[since, until)`` into groups keyed by ``by`` (in that order): the
    direct computation, which the pre-summed path must always equal."""
    ledger = Ledger(by, since)
    for lease in intervals:
        ledger.add_interval(lease, since, until)
    return ledger.totals()


INTERVAL_COLUMNS = (
    LEASES.c.id,
    LEASES.c.subject,
    LEASES.c.pool,
    LEASES.c.resources,
    LEASES.c.borrowed,
    LEASES.c.granted_at,
    LEASES.c.released_at,
    LEASES.c.state,
    LEASES.c.checkpointed_at,
)


def as_interval(row: Any, now: datetime) -> Interval:
    return Interval(
        subject=row.subject,
        pool=row.pool,
        resources=dict(row.resources),
        borrowed=dict(row.borrowed or {}),
        start=row.granted_at,
        end=row.released_at or now,
        preempted=row.state == RequestState.PREEMPTED.value,
        checkpointed_at=row.checkpointed_at,
    )


def read_intervals(conn: sa.Connection, query: sa.Select[Any], now: datetime, subject: str | None) -> list[Interval]:
    if subject is not None:
        query = query.where(LEASES.c.subject == subject)
    return [as_interval(row, now) for row in conn.execute(query)]


def overlapping(since: datetime, until: datetime) -> sa.ColumnElement[bool]:
    """Leases that held anything during ``[since, until)``."""
    return sa.and_(LEASES.c.granted_at < until, sa.or_(LEASES.c.released_at.is_(None), LEASES.c.released_at > since))


def intervals(
    conn: sa.Connection, since: datetime, until: datetime, now: datetime, subject: str | None
) -> list[Interval]:
    """The leases that held anything during ``[since, until)``; a live lease ends at ``now``."""
    return read_intervals(conn, sa.select(*INTERVAL_COLUMNS).where(overlapping(since, until)), now, subject)


def now_utc() -> datetime:
    return datetime.now(UTC)


def add_floats(into: dict[str, float], other: dict[str, float]) -> None:
    for key, amount in other.items():
        into[key] = into.get(key, 0.0) + amount

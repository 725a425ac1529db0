"""The usage ledger: key-seconds per subject, pool and time bucket, computed on read from lease rows.

Every lease row carries its subject, pool, resources, borrowed part, ``granted_at`` and (once it ended)
``released_at`` and final state, written in the transaction that moved it. Those rows are the ledger:
summing their intervals, clipped to the window and its buckets, gives the same answer on every replica
and after any restart, with no table of its own to keep in step with the lease lifecycle (see
docs/decisions.md, "Usage is computed on read"). A lease still running counts up to ``now``.

Preempted work splits in two: all the time a preempted lease held (``preempted``), and the part since
its holder's last checkpoint report (``lost``: ``checkpointed_at`` on the row, set by ``POST
/v1/leases/{id}/checkpoint``; from the grant when it reported none) — the work a rerun must redo.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from respools.model import RequestState
from respools.server.db.tables import LeaseRow, table

LEASES = table(LeaseRow)


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


def _add(into: dict[str, float], vector: dict[str, int], seconds: float) -> None:
    for key, amount in vector.items():
        into[key] = into.get(key, 0.0) + amount * seconds


def _floor(at: datetime, width: timedelta) -> datetime:
    """The UTC start of the day or hour ``at`` falls in."""
    start = at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return start.replace(hour=0) if width == timedelta(days=1) else start


def _pieces(start: datetime, end: datetime, width: timedelta | None) -> Iterable[tuple[datetime | None, float]]:
    """``[start, end)`` cut at bucket boundaries: (bucket start, seconds in it)."""
    if width is None:
        yield None, (end - start).total_seconds()
        return
    bucket = _floor(start, width)
    while bucket < end:
        nxt = bucket + width
        yield bucket, (min(end, nxt) - max(start, bucket)).total_seconds()
        bucket = nxt


def _group_key(by: Sequence[Dimension], parts: dict[Dimension, str], bucket: datetime | None) -> tuple[Any, ...]:
    return tuple(bucket if d in (Dimension.DAY, Dimension.HOUR) else parts[d] for d in by)


def aggregate(
    intervals: Iterable[Interval], since: datetime, until: datetime, by: Sequence[Dimension]
) -> dict[tuple[Any, ...], Totals]:
    """Sum each interval clipped to ``[since, until)`` into groups keyed by ``by`` (in that order)."""
    width = timedelta(hours=1) if Dimension.HOUR in by else timedelta(days=1) if Dimension.DAY in by else None
    groups: dict[tuple[Any, ...], Totals] = defaultdict(Totals)
    for lease in intervals:
        start, end = max(lease.start, since), min(lease.end, until)
        if end <= start:
            continue
        in_share = {k: v - lease.borrowed.get(k, 0) for k, v in lease.resources.items()}
        parts = {Dimension.SUBJECT: lease.subject, Dimension.POOL: lease.pool}
        for bucket, seconds in _pieces(start, end, width):
            totals = groups[_group_key(by, parts, bucket)]
            totals.leases += 1
            _add(totals.in_share, in_share, seconds)
            _add(totals.borrowed, lease.borrowed, seconds)
            if lease.preempted:
                _add(totals.preempted, lease.resources, seconds)
        if lease.preempted:
            for bucket, seconds in _pieces(max(start, lease.lost_from), end, width):
                _add(groups[_group_key(by, parts, bucket)].lost, lease.resources, seconds)
    return dict(groups)


def intervals(
    conn: sa.Connection, since: datetime, until: datetime, now: datetime, subject: str | None
) -> list[Interval]:
    """The leases that held anything during ``[since, until)``; a live lease ends at ``now``."""
    query = sa.select(
        LEASES.c.subject,
        LEASES.c.pool,
        LEASES.c.resources,
        LEASES.c.borrowed,
        LEASES.c.granted_at,
        LEASES.c.released_at,
        LEASES.c.state,
        LEASES.c.checkpointed_at,
    ).where(LEASES.c.granted_at < until, sa.or_(LEASES.c.released_at.is_(None), LEASES.c.released_at > since))
    if subject is not None:
        query = query.where(LEASES.c.subject == subject)
    return [
        Interval(
            subject=row.subject,
            pool=row.pool,
            resources=dict(row.resources),
            borrowed=dict(row.borrowed or {}),
            start=row.granted_at,
            end=row.released_at or now,
            preempted=row.state == RequestState.PREEMPTED.value,
            checkpointed_at=row.checkpointed_at,
        )
        for row in conn.execute(query)
    ]


def now_utc() -> datetime:
    return datetime.now(UTC)


def add_floats(into: dict[str, float], other: dict[str, float]) -> None:
    for key, amount in other.items():
        into[key] = into.get(key, 0.0) + amount

"""Utilization over time for the dashboard's charts, computed from the usage ledger (the lease rows).

Each lease row says what it held and from when to when (``granted_at`` to ``released_at``, or on while
it lives), so the in-share and borrowed use of every pool and team over any window is a sum of those
intervals — the same answer on every replica, and after a restart, as ``GET /v1/usage`` (see
docs/decisions.md, "The utilization charts read the ledger"). The capacity and limit lines are today's
definitions (the store keeps no history of them); the reserved line follows the reservation windows.

A series is a list of change points ``(epoch seconds, value)`` starting at the window's start, in
the scheduling core's units (milli-GPU for ``gpu``), ready for :func:`charts.step_chart`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from respools.model import Policy, Reservation
from respools.server.dashboard.charts import Change
from respools.server.dashboard.formatting import as_utc
from respools.server.dashboard.usage import PoolUsage, reserved_at
from respools.server.usage import Interval

SeriesKey = tuple[str, ...]
POOL_FIELDS = ("capacity", "in_share", "borrowed")
TEAM_FIELDS = ("in_share", "borrowed", "reserved", "limit")


def pool_series(pool: str, key: str) -> SeriesKey:
    return ("pool", pool, key)


def team_series(pool: str, subject: str, key: str) -> SeriesKey:
    return ("team", pool, subject, key)


@dataclass(frozen=True, slots=True)
class Utilization:
    """The series of one window ``[since, until]``, by series key and field name."""

    since: datetime
    until: datetime
    series_by_key: Mapping[SeriesKey, Mapping[str, list[Change]]] = field(default_factory=dict)

    @property
    def window_s(self) -> float:
        return (self.until - self.since).total_seconds()

    def series(self, key: SeriesKey, name: str) -> list[Change]:
        return list(self.series_by_key.get(key, {}).get(name, ()))

    def as_json(self) -> dict[str, object]:
        """Plain data: ``{"since", "until", "series": [{"key": [...], "<field>": [[t, v], ...]}]}``."""
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "series": [
                {"key": list(key)} | {name: [list(point) for point in points] for name, points in fields.items()}
                for key, fields in sorted(self.series_by_key.items())
            ],
        }


def _steps(deltas: Iterable[tuple[float, int]], t0: float) -> list[Change]:
    """Change points of a running sum of ``(t, delta)`` (every ``t >= t0``), starting at ``t0``."""
    by_time: dict[float, int] = defaultdict(int)
    by_time[t0] += 0
    for t, delta in deltas:
        by_time[t] += delta
    out: list[Change] = []
    running = 0
    for t in sorted(by_time):
        running += by_time[t]
        if not out or out[-1][1] != running:
            out.append((t, float(running)))
    return out


def _use(spans: Sequence[Interval], key: str, t0: float, t1: float) -> tuple[list[Change], list[Change]]:
    """In-share and borrowed amounts of ``key`` over ``[t0, t1]`` held by ``spans``."""
    share: list[tuple[float, int]] = []
    lent: list[tuple[float, int]] = []
    for span in spans:
        start, end = max(span.start.timestamp(), t0), span.end.timestamp()
        if end <= start or start > t1:
            continue
        borrowed = span.borrowed.get(key, 0)
        in_share = span.resources.get(key, 0) - borrowed
        share.append((start, in_share))
        lent.append((start, borrowed))
        if end < t1:  # a lease still live at the window's end holds on
            share.append((end, -in_share))
            lent.append((end, -borrowed))
    return _steps(share, t0), _steps(lent, t0)


def _reserved(
    policy: Policy | None, reservations: Sequence[Reservation], key: str, since: datetime, until: datetime
) -> list[Change]:
    moments = {since} | {as_utc(at) for r in reservations for at in (r.start, r.end) if since < as_utc(at) <= until}
    out: list[Change] = []
    for at in sorted(moments):
        value = float(reserved_at(policy, reservations, at).get(key, 0))
        if not out or out[-1][1] != value:
            out.append((at.timestamp(), value))
    return out


@dataclass(frozen=True, slots=True)
class PoolInputs:
    """What one pool's series need besides the ledger: its accounting now and its chart key."""

    usage: PoolUsage
    key: str
    policies: Sequence[Policy]
    reservations: Sequence[Reservation]


def utilization(
    pools: Sequence[PoolInputs], spans: Sequence[Interval], since: datetime, until: datetime
) -> Utilization:
    """Every pool's series (capacity, in share, borrowed) and every team's of ``usage.teams`` (in share,
    borrowed, reserved, limit) over ``[since, until]``, from the lease intervals ``spans``."""
    t0, t1 = since.timestamp(), until.timestamp()
    by_pool: dict[str, list[Interval]] = defaultdict(list)
    for span in spans:
        by_pool[span.pool].append(span)
    out: dict[SeriesKey, dict[str, list[Change]]] = {}
    for inputs in pools:
        usage, key = inputs.usage, inputs.key
        held = by_pool.get(usage.pool, [])
        share, lent = _use(held, key, t0, t1)
        out[pool_series(usage.pool, key)] = {
            "capacity": [(t0, float(usage.capacity.get(key, 0)))],
            "in_share": share,
            "borrowed": lent,
        }
        policies = {p.subject: p for p in inputs.policies}
        for team in usage.teams:
            share, lent = _use([s for s in held if s.subject == team.subject], key, t0, t1)
            mine = [r for r in inputs.reservations if r.subject == team.subject]
            out[team_series(usage.pool, team.subject, key)] = {
                "in_share": share,
                "borrowed": lent,
                "reserved": _reserved(policies.get(team.subject), mine, key, since, until),
                "limit": [(t0, float(team.limit.get(key, 0)))],
            }
    return Utilization(since, until, out)

"""The Usage page's content: GPU-hours per team over time (in share and borrowed), preempted GPU-hours,
and the chargeback table, for a window of whole days (or hours) ending now.

Everything is computed from the usage ledger (:mod:`respools.server.usage`) with the same
aggregation as ``GET /v1/usage``, so the page shows what the API answers, on every replica."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from urllib.parse import urlencode

import sqlalchemy as sa

from respools.model import GPU
from respools.server import usage
from respools.server.dashboard.bar_charts import BarChart, Segment, gpu_hours, stacked_bars
from respools.server.dashboard.chargeback import ChargeRow, charge_rows
from respools.server.errors import invalid
from respools.server.usage_query import usage_totals

MAX_DAYS = 400
"""As ``GET /v1/usage``'s widest window."""
MAX_HOURLY_DAYS = 7
"""Hourly bars beyond a week are too thin to read (and ``day`` answers the question)."""


class Bucket(StrEnum):
    DAY = "day"
    HOUR = "hour"


@dataclass(frozen=True, slots=True)
class Window:
    since: datetime
    until: datetime
    bucket: Bucket
    days: int

    @property
    def dimension(self) -> usage.Dimension:
        return usage.Dimension.HOUR if self.bucket is Bucket.HOUR else usage.Dimension.DAY

    @property
    def width(self) -> timedelta:
        return timedelta(hours=1) if self.bucket is Bucket.HOUR else timedelta(days=1)

    def buckets(self) -> list[datetime]:
        out, at = [], self.since
        while at < self.until:
            out.append(at)
            at += self.width
        return out


def window_ending(now: datetime, days: int, bucket: Bucket) -> Window:
    """The last ``days`` days up to ``now``, starting on a bucket boundary (so the first bar is whole):
    today and the ``days - 1`` before it by day; the last ``24 * days`` hours, this one included, by hour."""
    if not 1 <= days <= MAX_DAYS:
        raise invalid(f"days: {days} is not between 1 and {MAX_DAYS}", "days")
    if bucket is Bucket.HOUR and days > MAX_HOURLY_DAYS:
        raise invalid(f"days: hourly bars cover at most {MAX_HOURLY_DAYS} days; choose day", "days")
    hour = now.replace(minute=0, second=0, microsecond=0)
    if bucket is Bucket.HOUR:
        since = hour - timedelta(hours=24 * days - 1)
    else:
        since = hour.replace(hour=0) - timedelta(days=days - 1)
    return Window(since, now, bucket, days)


@dataclass(frozen=True, slots=True)
class UsagePage:
    window: Window
    teams_chart: BarChart
    preempted_chart: BarChart
    subjects: tuple[str, ...]
    rows: tuple[ChargeRow, ...]
    pools: tuple[str, ...]
    prices: Mapping[str, float]

    @property
    def total(self) -> ChargeRow:
        return ChargeRow(
            "all",
            "all",
            sum(r.in_share for r in self.rows),
            sum(r.borrowed for r in self.rows),
            sum(r.preempted for r in self.rows),
            sum(r.lost for r in self.rows),
        )

    @property
    def total_cost(self) -> float | None:
        costs = [c for c in (r.cost(self.prices) for r in self.rows) if c is not None]
        return sum(costs) if costs else None

    def query(self, *, prices: bool = True) -> str:
        """The page's own query string (what the CSV link and the window form carry)."""
        params: list[tuple[str, str]] = [
            ("since", self.window.since.isoformat()),
            ("until", self.window.until.isoformat()),
        ]
        if prices:
            params += [("price", f"{pool}={price_text(price)}") for pool, price in sorted(self.prices.items())]
        return urlencode(params)


def price_text(price: float) -> str:
    """A price as a person typed it: ``3``, ``2.5`` (not ``3.0``, nor ``2.5e+00``)."""
    return f"{price:.10g}"


def _gpu_seconds(vector: Mapping[str, float]) -> float:
    return round(vector.get(GPU, 0.0) / 1000, 3)  # as GET /v1/usage rounds


def _kind(totals: usage.Totals, kind: str) -> dict[str, float]:
    """A kind of the ledger, or ``checkpointed``: preempted time before the last checkpoint (kept work)."""
    if kind != "checkpointed":
        vector: dict[str, float] = getattr(totals, kind)
        return vector
    return {k: v - totals.lost.get(k, 0.0) for k, v in totals.preempted.items()}


def _segments(
    groups: Mapping[tuple[object, ...], usage.Totals], index: Mapping[datetime, int], kinds: Sequence[str]
) -> list[Segment]:
    """Per bucket, every team's amounts of ``kinds``, teams in name order (so a team keeps its place)."""
    out = []
    for (subject, bucket), totals in sorted(groups.items(), key=lambda item: (str(item[0][1]), str(item[0][0]))):
        assert isinstance(bucket, datetime)
        for kind in kinds:
            seconds = _gpu_seconds(_kind(totals, kind))
            if seconds > 0:
                out.append(Segment(index[bucket], str(subject), kind, seconds))
    return out


def build_page(
    conn: sa.Connection, window: Window, now: datetime, subject: str | None, prices: Mapping[str, float]
) -> UsagePage:
    """The page from the ledger, as ``GET /v1/usage`` sums it (``subject``: only that team's)."""
    since, until = window.since, window.until
    by_time = usage_totals(conn, since, until, now, subject, [usage.Dimension.SUBJECT, window.dimension])
    by_pool = usage_totals(conn, since, until, now, subject, [usage.Dimension.SUBJECT, usage.Dimension.POOL])
    buckets = window.buckets()
    index = {at: i for i, at in enumerate(buckets)}
    hourly = window.bucket is Bucket.HOUR
    rows = tuple(r for r in charge_rows(by_pool) if r.total > 0)
    span = f"the last {window.days} day{'s' if window.days > 1 else ''}, by {window.bucket.value} (UTC)"
    used = sum(r.total for r in rows) * 3600
    preempted = sum(r.preempted for r in rows) * 3600
    lost = sum(r.lost for r in rows) * 3600
    return UsagePage(
        window=window,
        teams_chart=stacked_bars(
            "GPU-hours by team",
            f"GPU-hours per team over {span}, in share and borrowed: {gpu_hours(used)} in all; "
            "the chargeback table below lists the figures.",
            buckets,
            _segments(by_time, index, ("in_share", "borrowed")),
            hourly=hourly,
        ),
        preempted_chart=stacked_bars(
            "Preempted GPU-hours by team",
            f"GPU-hours held by leases that ended preempted, per team over {span}: {gpu_hours(preempted)} in all, "
            f"{gpu_hours(lost)} of them lost (since the last checkpoint).",
            buckets,
            _segments(by_time, index, ("lost", "checkpointed")),
            hourly=hourly,
        ),
        subjects=tuple(sorted({r.subject for r in rows})),
        rows=rows,
        pools=tuple(sorted({r.pool for r in rows} | set(prices))),
        prices=dict(prices),
    )

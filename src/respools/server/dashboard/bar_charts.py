"""Geometry of the Usage page's stacked bar charts: one bar per time bucket, stacked by team and kind.

Computed here, like the step charts of :mod:`charts`, so that the template only draws (no script
draws charts, and nothing is fetched at view time). Each segment keeps its exact value (GPU-seconds,
as ``GET /v1/usage`` reports them) in the markup, so a reader — or a test — can check the picture
against the API."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from respools.server.dashboard.charts import BOTTOM, LEFT, RIGHT, TOP, WIDTH, Tick, nice_ceiling
from respools.server.dashboard.formatting import holder_color

HEIGHT = 220
GAP = 0.2
"""Share of a bucket's width left empty between bars."""
MAX_X_LABELS = 12


@dataclass(frozen=True, slots=True)
class Segment:
    """One team's amount of one kind (``in_share``, ``borrowed``, ``preempted``…) in one bucket."""

    bucket: int
    subject: str
    kind: str
    seconds: float
    """GPU-seconds."""


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    color: int
    subject: str
    kind: str
    bucket: datetime
    seconds: float


@dataclass(frozen=True, slots=True)
class BarChart:
    title: str
    description: str
    width: int
    height: int
    left: float
    right: float
    top: float
    bottom: float
    bars: tuple[Bar, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]

    @property
    def empty(self) -> bool:
        return not self.bars


def gpu_hours(seconds: float) -> str:
    """GPU-seconds as GPU-hours, with the precision a value of that size needs."""
    hours = seconds / 3600
    if hours == 0:
        return "0"
    if abs(hours) >= 100:
        return f"{hours:,.0f}"
    if abs(hours) >= 1:
        return f"{hours:,.2f}"
    return f"{hours:.4f}"


def bucket_label(at: datetime, hourly: bool) -> str:
    if not hourly:
        return at.strftime("%m-%d")
    return at.strftime("%m-%d %H:00") if at.hour == 0 else at.strftime("%H:00")


def stacked_bars(
    title: str, description: str, buckets: Sequence[datetime], segments: Sequence[Segment], *, hourly: bool
) -> BarChart:
    """Bars over ``buckets`` (oldest first), each stacked from ``segments`` in the order given."""
    right, bottom = WIDTH - RIGHT, HEIGHT - BOTTOM
    totals = [0.0] * len(buckets)
    for segment in segments:
        totals[segment.bucket] += segment.seconds
    v_max = nice_ceiling(max(totals, default=0.0) / 3600) * 3600
    slot = (right - LEFT) / max(len(buckets), 1)
    bar_width = round(slot * (1 - GAP), 2)
    scale = (bottom - TOP) / v_max
    stacked = [0.0] * len(buckets)
    bars = []
    for segment in segments:
        if segment.seconds <= 0:
            continue
        base = stacked[segment.bucket]
        stacked[segment.bucket] = base + segment.seconds
        y_top = bottom - (base + segment.seconds) * scale
        bars.append(
            Bar(
                x=round(LEFT + slot * segment.bucket + slot * GAP / 2, 2),
                y=round(y_top, 2),
                width=bar_width,
                height=round(segment.seconds * scale, 2),
                color=holder_color(segment.subject),
                subject=segment.subject,
                kind=segment.kind,
                bucket=buckets[segment.bucket],
                seconds=segment.seconds,
            )
        )
    every = max(1, -(-len(buckets) // MAX_X_LABELS))
    x_ticks = tuple(
        Tick(round(LEFT + slot * (i + 0.5), 2), bucket_label(at, hourly))
        for i, at in enumerate(buckets)
        if i % every == 0
    )
    y_ticks = tuple(Tick(round(bottom - v_max * f * scale, 2), gpu_hours(v_max * f)) for f in (0.0, 0.5, 1.0))
    return BarChart(title, description, WIDTH, HEIGHT, LEFT, right, TOP, bottom, tuple(bars), x_ticks, y_ticks)

"""Geometry of the reservations timeline: one row per pool and subject, one bar per window.

The axis starts a little before now (so a window that just began shows its start) and runs to the end
of the last window, at least a day and at most two weeks; a bar that reaches past either edge is cut
there and says so."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from respools.model import Reservation
from respools.server.dashboard.formatting import as_utc, holder_color

WIDTH = 1240
LABEL_WIDTH = 250.0
ROW_HEIGHT = 30.0
AXIS_HEIGHT = 26.0
PAST = timedelta(hours=1)
MIN_SPAN = timedelta(hours=24)
MAX_SPAN = timedelta(days=14)
_TICK_STEPS_H = (1, 2, 3, 6, 12, 24, 48, 72, 168)
MAX_TICKS = 8


@dataclass(frozen=True, slots=True)
class Bar:
    reservation: Reservation
    row: int
    x: float
    width: float
    y: float
    active: bool
    cut_start: bool
    cut_end: bool
    color: int


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    y: float


@dataclass(frozen=True, slots=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True, slots=True)
class Timeline:
    width: int
    height: float
    left: float
    start: datetime
    end: datetime
    now_x: float
    rows: tuple[Row, ...]
    bars: tuple[Bar, ...]
    ticks: tuple[Tick, ...]


def build_timeline(reservations: Sequence[Reservation], now: datetime) -> Timeline:
    start = now - PAST
    latest = max((as_utc(r.end) for r in reservations), default=now)
    end = min(max(latest, start + MIN_SPAN), start + MAX_SPAN)
    span = (end - start).total_seconds()

    def x(moment: datetime) -> float:
        offset = (moment - start).total_seconds() / span
        return round(LABEL_WIDTH + min(max(offset, 0.0), 1.0) * (WIDTH - LABEL_WIDTH), 2)

    keys = sorted({(r.pool, r.subject) for r in reservations})
    row_of = {key: i for i, key in enumerate(keys)}
    rows = tuple(Row(f"{pool} · {subject}", AXIS_HEIGHT + i * ROW_HEIGHT) for i, (pool, subject) in enumerate(keys))
    bars = []
    for reservation in sorted(reservations, key=lambda r: (as_utc(r.start), r.id)):
        begins, ends = as_utc(reservation.start), as_utc(reservation.end)
        if ends <= start or begins >= end:
            continue
        row = row_of[(reservation.pool, reservation.subject)]
        left, right = x(begins), x(ends)
        bars.append(
            Bar(
                reservation=reservation,
                row=row,
                x=left,
                width=max(right - left, 2.0),
                y=AXIS_HEIGHT + row * ROW_HEIGHT + 4,
                active=begins <= now < ends,
                cut_start=begins < start,
                cut_end=ends > end,
                color=holder_color(reservation.subject),
            )
        )
    step_h = next((h for h in _TICK_STEPS_H if span / 3600 / h <= MAX_TICKS), _TICK_STEPS_H[-1])
    first = datetime.fromtimestamp(math.ceil(start.timestamp() / (step_h * 3600)) * step_h * 3600, start.tzinfo)
    ticks = []
    moment = first
    while moment <= end:
        label = moment.strftime("%H:%M") if step_h < 24 and moment.hour else moment.strftime("%a %d %b")
        ticks.append(Tick(x(moment), label))
        moment += timedelta(hours=step_h)
    return Timeline(
        width=WIDTH,
        height=AXIS_HEIGHT + max(len(keys), 1) * ROW_HEIGHT + 6,
        left=LABEL_WIDTH,
        start=start,
        end=end,
        now_x=x(now),
        rows=rows,
        bars=tuple(bars),
        ticks=tuple(ticks),
    )

"""Geometry of the utilization charts, computed here so that the templates only draw.

A series is a list of *change points* ``(t, value)``: the value holds from ``t`` until the next point
(a point only where a value changed; see :mod:`utilization`). Charts are step charts, which is what
usage is: it jumps when a lease is granted or ends. Areas stack (in share, then borrowed on top); lines
(capacity, reserved, limit) are drawn over them. Everything lands in a fixed ``viewBox`` that the
stylesheet scales to the page width."""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from respools.model import GPU, MILLI
from respools.server.dashboard.formatting import amount

Change = tuple[float, float]
"""``(epoch seconds, value)``: the value from that moment on."""

WIDTH = 720
HEIGHT = 190
SMALL_WIDTH = 320
SMALL_HEIGHT = 130
"""Sizes of the ``viewBox``: the stylesheet caps each chart near its own width, so text keeps its size."""
LEFT, RIGHT, TOP, BOTTOM = 46.0, 12.0, 10.0, 24.0
HEADROOM = 1.05
_NICE = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
_TIME_STEPS = (30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400)
MAX_X_TICKS = 6


@dataclass(frozen=True, slots=True)
class Layer:
    css: str
    label: str
    series: Sequence[Change]


@dataclass(frozen=True, slots=True)
class Shape:
    css: str
    label: str
    d: str


@dataclass(frozen=True, slots=True)
class Tick:
    pos: float
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    description: str
    width: int
    height: int
    left: float
    right: float
    top: float
    bottom: float
    areas: tuple[Shape, ...]
    lines: tuple[Shape, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]

    @property
    def empty(self) -> bool:
        return not self.areas and not self.lines


def value_at(series: Sequence[Change], t: float) -> float | None:
    """The value in force at ``t``; ``None`` before the first point."""
    i = bisect_right([p[0] for p in series], t)
    return series[i - 1][1] if i else None


def nice_ceiling(value: float) -> float:
    """The smallest round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k) that is ≥ ``value``."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for factor in _NICE:
        candidate = factor * 10.0**exponent
        if candidate >= value * (1 - 1e-9):
            return candidate
    return 10.0 ** (exponent + 1)


def _scale(key: str) -> float:
    return float(MILLI) if key == GPU else 1.0


@dataclass(frozen=True, slots=True)
class _Frame:
    t0: float
    t1: float
    v_max: float
    width: int
    height: int

    def x(self, t: float) -> float:
        span = self.t1 - self.t0 or 1.0
        return round(LEFT + (t - self.t0) / span * (self.width - LEFT - RIGHT), 2)

    def y(self, v: float) -> float:
        return round(self.height - BOTTOM - v / self.v_max * (self.height - TOP - BOTTOM), 2)


def _intervals(series_list: Sequence[Sequence[Change]], start: float, end: float) -> list[tuple[float, float]]:
    cuts = sorted({start, end} | {t for series in series_list for t, _ in series if start < t < end})
    return list(itertools.pairwise(cuts))


def _step_points(frame: _Frame, intervals: Sequence[tuple[float, float]], values: Sequence[float]) -> list[str]:
    """The corners of a step line; runs of equal values become one segment."""
    runs: list[tuple[float, float, float]] = []
    for (a, b), v in zip(intervals, values, strict=True):
        if runs and runs[-1][2] == v:
            runs[-1] = (runs[-1][0], b, v)
        else:
            runs.append((a, b, v))
    points: list[str] = []
    for a, b, v in runs:
        y = frame.y(v)
        points += [f"{frame.x(a)},{y}", f"{frame.x(b)},{y}"]
    return points


def _first_time(series_list: Sequence[Sequence[Change]]) -> float | None:
    firsts = [series[0][0] for series in series_list if series]
    return min(firsts) if firsts else None


def _time_ticks(frame: _Frame, max_ticks: int) -> tuple[Tick, ...]:
    t0, t1 = frame.t0, frame.t1
    span = max(t1 - t0, 1.0)
    step = next((s for s in _TIME_STEPS if span / s <= max_ticks), _TIME_STEPS[-1])
    first = math.ceil(t0 / step) * step
    fmt = "%H:%M:%S" if step < 60 else "%H:%M" if step < 86400 else "%m-%d"
    half_label = 4 * len(fmt)  # about half a label's width at the tick font size
    return tuple(
        Tick(frame.x(t), datetime.fromtimestamp(t, UTC).strftime(fmt))
        for t in range(int(first), int(t1) + 1, step)
        if frame.x(t) + half_label <= frame.width  # a label cut by the edge would only confuse
    )


def step_chart(
    title: str,
    key: str,
    t0: float,
    t1: float,
    areas: Sequence[Layer],
    lines: Sequence[Layer] = (),
    description: str = "",
    *,
    small: bool = False,
) -> Chart:
    """A chart of ``key`` over ``[t0, t1]`` (or from the first point, when that is later): ``areas``
    stacked in order, ``lines`` on top."""
    width, height = (SMALL_WIDTH, SMALL_HEIGHT) if small else (WIDTH, HEIGHT)
    all_series = [layer.series for layer in (*areas, *lines)]
    first = _first_time(all_series)
    if first is None or first >= t1:
        return Chart(title, description, width, height, LEFT, width - RIGHT, TOP, height - BOTTOM, (), (), (), ())
    start = max(t0, first)
    intervals = _intervals(all_series, start, t1)

    def values(series: Sequence[Change]) -> list[float]:
        return [value_at(series, a) or 0.0 for a, _ in intervals]

    tops: list[list[float]] = []
    running = [0.0] * len(intervals)
    for layer in areas:
        running = [r + v for r, v in zip(running, values(layer.series), strict=True)]
        tops.append(running)
    line_values = [values(layer.series) for layer in lines]
    peak = max([v for top in tops for v in top] + [v for vs in line_values for v in vs] + [0.0])
    scale = _scale(key)
    # headroom above the peak, so a capacity line does not sit on the frame; a young history fills the width
    frame = _Frame(start, t1, nice_ceiling(peak * HEADROOM / scale) * scale, width, height)

    shapes = []
    bottom = [0.0] * len(intervals)
    for layer, top in zip(areas, tops, strict=True):
        upper = _step_points(frame, intervals, top)
        lower = _step_points(frame, intervals, bottom)[::-1]
        shapes.append(Shape(layer.css, layer.label, "M" + " L".join(upper + lower) + " Z"))
        bottom = top
    drawn = [
        Shape(layer.css, layer.label, "M" + " L".join(_step_points(frame, intervals, vs)))
        for layer, vs in zip(lines, line_values, strict=True)
        if layer.series
    ]
    y_ticks = tuple(Tick(frame.y(frame.v_max * f), amount(key, frame.v_max * f)) for f in (0.0, 0.5, 1.0))
    return Chart(
        title,
        description,
        width,
        height,
        LEFT,
        width - RIGHT,
        TOP,
        height - BOTTOM,
        tuple(shapes),
        tuple(drawn),
        _time_ticks(frame, MAX_X_TICKS if not small else 4),
        y_ticks,
    )

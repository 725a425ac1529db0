"""Utilization history: usage sampled from the store, kept in memory as change points.

Why in memory and not a table: every replica samples the shared store itself, so each draws the same
history (from its own start on) without a migration, a writer or a retention job; what a restart
loses — at most the charts' window — the event log and the Prometheus gauges
(``respools_pool_in_use``, ``respools_pool_borrowed``) keep for the long term.

A sample is taken on every change the process hears of (at most once per ``sample_min_gap_s``) and at
least every ``sample_every_s``; only values that changed are stored, so an idle pool costs nothing and
a busy one is recorded at the resolution of its changes."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from respools.server.changes import Changes
from respools.server.dashboard.charts import Change
from respools.server.dashboard.formatting import primary_key
from respools.server.dashboard.usage import PoolUsage

log = logging.getLogger(__name__)

SeriesKey = tuple[str, ...]
Point = tuple[float, tuple[int, ...]]

POOL_FIELDS = ("capacity", "in_share", "borrowed")
TEAM_FIELDS = ("in_share", "borrowed", "reserved", "limit")


def pool_series(pool: str, key: str) -> SeriesKey:
    return ("pool", pool, key)


def team_series(pool: str, subject: str, key: str) -> SeriesKey:
    return ("team", pool, subject, key)


class History:
    """Change points per series for the last ``window_s`` (thread-safe)."""

    def __init__(self, window_s: float, max_points: int) -> None:
        self.window_s = window_s
        self._max_points = max_points
        self._series: dict[SeriesKey, deque[Point]] = {}
        self._lock = threading.Lock()

    def record(self, at: float, key: SeriesKey, values: tuple[int, ...]) -> bool:
        """Store ``values`` at ``at`` unless they equal the last point; True when stored."""
        with self._lock:
            points = self._series.setdefault(key, deque(maxlen=self._max_points))
            if points and points[-1][1] == values:
                return False
            points.append((at, values))
            # keep one point from before the window: it says what held when the window opens
            while len(points) >= 2 and points[1][0] <= at - self.window_s:
                points.popleft()
            return True

    def forget_stale(self, now: float, current: set[SeriesKey]) -> None:
        """Drop series no sample produces any more (a deleted pool or policy) once out of the window."""
        with self._lock:
            for key in [k for k, points in self._series.items() if k not in current]:
                if not self._series[key] or self._series[key][-1][0] < now - self.window_s:
                    del self._series[key]

    def series(self, key: SeriesKey, field: int) -> list[Change]:
        """One field of a series as chart change points."""
        with self._lock:
            points = list(self._series.get(key, ()))
        out: list[Change] = []
        for at, values in points:
            value = float(values[field])
            if not out or out[-1][1] != value:
                out.append((at, value))
        return out

    def __len__(self) -> int:
        with self._lock:
            return sum(len(points) for points in self._series.values())


def record_usage(history: History, usages: list[PoolUsage], at: float) -> None:
    """One sample: per pool and per team, the pool's chart key (see :func:`primary_key`)."""
    current: set[SeriesKey] = set()
    for usage in usages:
        key = primary_key(usage.capacity)
        if key is None:
            continue
        series = pool_series(usage.pool, key)
        current.add(series)
        history.record(at, series, (usage.capacity.get(key, 0), usage.in_share(key), usage.borrowed.get(key, 0)))
        for team in usage.teams:
            series = team_series(usage.pool, team.subject, key)
            current.add(series)
            history.record(
                at,
                series,
                (team.in_share(key), team.borrowed.get(key, 0), team.reserved.get(key, 0), team.limit.get(key, 0)),
            )
    history.forget_stale(at, current)


class Sampler:
    """The thread that feeds :class:`History` from ``read`` (which reads the store)."""

    def __init__(self, read: Callable[[], list[PoolUsage]], history: History, min_gap_s: float, every_s: float) -> None:
        self._read = read
        self.history = history
        self._min_gap_s = min_gap_s
        self._every_s = every_s
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def on_changes(self, changes: Changes) -> None:
        """Change-bus subscriber: something committed, usage may have moved."""
        self._wake.set()

    def sample_once(self) -> None:
        record_usage(self.history, self._read(), time.time())

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="respools-dashboard-sampler", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                self.sample_once()
            except Exception:  # the store may be briefly unavailable; the next sample catches up
                log.warning("dashboard usage sample failed", exc_info=True)
            if self._stopping.wait(self._min_gap_s):
                return
            self._wake.wait(max(0.0, self._every_s - self._min_gap_s))

"""The utilization charts of the history section: per pool (in share and borrowed against capacity)
and per team (in share and borrowed against its reserved share and limit), from the sampled history."""

from __future__ import annotations

from dataclasses import dataclass

from respools.server.dashboard.charts import Chart, Layer, step_chart
from respools.server.dashboard.formatting import amount
from respools.server.dashboard.sampler import History, pool_series, team_series
from respools.server.dashboard.state import PoolView


@dataclass(frozen=True, slots=True)
class TeamChart:
    subject: str
    chart: Chart


@dataclass(frozen=True, slots=True)
class PoolCharts:
    pool: str
    key: str
    chart: Chart
    teams: tuple[TeamChart, ...]


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} minutes"


def pool_charts(view: PoolView, history: History, now: float) -> PoolCharts | None:
    key = view.chart_key
    if key is None:
        return None
    t0 = now - history.window_s
    usage = view.usage
    series = pool_series(usage.pool, key)
    chart = step_chart(
        f"{usage.pool} · {key}",
        key,
        t0,
        now,
        areas=[
            Layer("area-share", "in share", history.series(series, 1)),
            Layer("area-borrowed", "borrowed", history.series(series, 2)),
        ],
        lines=[Layer("line-capacity", "capacity", history.series(series, 0))],
        description=(
            f"{key} in pool {usage.pool} over the last {_minutes(history.window_s)}; now "
            f"{amount(key, usage.in_share(key))} in share and {amount(key, usage.borrowed.get(key, 0))} borrowed "
            f"of {amount(key, usage.capacity.get(key, 0))}."
        ),
    )
    teams = []
    for team in usage.teams:
        series = team_series(usage.pool, team.subject, key)
        teams.append(
            TeamChart(
                team.subject,
                step_chart(
                    f"{team.subject} in {usage.pool}",
                    key,
                    t0,
                    now,
                    areas=[
                        Layer("area-share", "in share", history.series(series, 0)),
                        Layer("area-borrowed", "borrowed", history.series(series, 1)),
                    ],
                    lines=[
                        Layer("line-reserved", "reserved", history.series(series, 2)),
                        Layer("line-limit", "limit", history.series(series, 3)),
                    ],
                    description=(
                        f"{key} used by {team.subject} in pool {usage.pool}: now "
                        f"{amount(key, team.in_share(key))} in share, {amount(key, team.borrowed.get(key, 0))} "
                        f"borrowed; reserved {amount(key, team.reserved.get(key, 0))}, "
                        f"limit {amount(key, team.limit.get(key, 0))}."
                    ),
                    small=True,
                ),
            )
        )
    return PoolCharts(usage.pool, key, chart, tuple(teams))

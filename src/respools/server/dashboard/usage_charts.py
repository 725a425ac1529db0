"""The utilization charts: per pool (in share and borrowed against capacity) and per team (in share
and borrowed against its reserved share and limit), from the ledger's series (:mod:`utilization`)."""

from __future__ import annotations

from dataclasses import dataclass

from respools.server.dashboard.charts import Chart, Layer, step_chart
from respools.server.dashboard.formatting import amount
from respools.server.dashboard.state import PoolView
from respools.server.dashboard.utilization import Utilization, pool_series, team_series


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


def pool_charts(view: PoolView, history: Utilization) -> PoolCharts | None:
    key = view.chart_key
    if key is None:
        return None
    t0, now = history.since.timestamp(), history.until.timestamp()
    usage = view.usage
    series = pool_series(usage.pool, key)
    chart = step_chart(
        f"{usage.pool} · {key}",
        key,
        t0,
        now,
        areas=[
            Layer("area-share", "in share", history.series(series, "in_share")),
            Layer("area-borrowed", "borrowed", history.series(series, "borrowed")),
        ],
        lines=[Layer("line-capacity", "capacity", history.series(series, "capacity"))],
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
                        Layer("area-share", "in share", history.series(series, "in_share")),
                        Layer("area-borrowed", "borrowed", history.series(series, "borrowed")),
                    ],
                    lines=[
                        Layer("line-reserved", "reserved", history.series(series, "reserved")),
                        Layer("line-limit", "limit", history.series(series, "limit")),
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

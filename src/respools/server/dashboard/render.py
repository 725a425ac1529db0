"""Jinja2 rendering of the page and of its live sections.

The page and each section are rendered from the same templates with the same context: the first load
gets them all in one page, and each live update gets the sections again as HTML fragments, so there is
one source of markup and no client-side templating."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from respools.server.dashboard import formatting
from respools.server.dashboard.bar_charts import gpu_hours
from respools.server.dashboard.state import DashboardState, Viewer
from respools.server.dashboard.usage_charts import PoolCharts, pool_charts
from respools.server.dashboard.usage_page import UsagePage, price_text

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

ASSETS = ("dashboard.css", "dashboard.js", "usage.js", "favicon.svg")
SECTIONS = ("pools", "leases", "queue", "history", "usage", "reservations")
"""Section names: ``templates/sections/<name>.html`` renders the inside of ``#sec-<name>``."""


def asset_version(name: str) -> str:
    """A digest of a static file, appended to its URL so a new release is never served from cache."""
    return hashlib.sha256((STATIC / name).read_bytes()).hexdigest()[:12]


def _amount(value: float, key: str) -> str:
    """``{{ value | amount(key) }}``: the filter takes the value first, as Jinja passes it."""
    return formatting.amount(key, value)


@dataclass(frozen=True, slots=True)
class View:
    """Everything a template may use."""

    state: DashboardState
    viewer: Viewer
    charts: tuple[PoolCharts, ...]
    version: int

    def as_context(self) -> dict[str, Any]:
        return {"state": self.state, "viewer": self.viewer, "charts": self.charts, "version": self.version}


def build_view(state: DashboardState, viewer: Viewer, version: int) -> View:
    charts = tuple(c for c in (pool_charts(p, state.utilization) for p in state.pools) if c is not None)
    return View(state, viewer, charts, version)


class Renderer:
    def __init__(self) -> None:
        env = Environment(
            loader=FileSystemLoader(TEMPLATES),
            autoescape=select_autoescape(default=True, default_for_string=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters.update(
            amount=_amount,
            utc=formatting.as_utc,
            gpu_model=formatting.gpu_model,
            vector=formatting.vector,
            duration=formatting.duration,
            iso=formatting.iso,
            clock=formatting.clock,
            wait_reason=formatting.wait_reason,
            step_labels=formatting.step_labels,
            label_link=formatting.label_link,
            placement=formatting.placement,
            color=formatting.holder_color,
            gpu_hours=gpu_hours,
            price=price_text,
        )
        env.globals.update(
            assets={name: asset_version(name) for name in ASSETS},
            sections=SECTIONS,
        )
        self._env = env

    def login(self, error: str | None = None) -> str:
        return self._env.get_template("login.html").render(error=error)

    def page(self, view: View) -> str:
        return self._env.get_template("dashboard.html").render(view.as_context() | {"here": "dashboard"})

    def usage_page(self, viewer: Viewer, page: UsagePage) -> str:
        return self._env.get_template("usage.html").render(viewer=viewer, page=page, here="usage")

    def sections(self, view: View) -> dict[str, str]:
        context = view.as_context()
        return {f"sec-{name}": self._env.get_template(f"sections/{name}.html").render(context) for name in SECTIONS}

"""Dashboard settings, read from ``RESPOOLS_DASHBOARD_*`` variables.

They live apart from :class:`respools.server.settings.Settings` (which forbids unknown fields) so that
the dashboard can be tuned — a deployment shows a longer history, tests poll faster — without
widening the service's own configuration surface."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ENV_PREFIX = "RESPOOLS_DASHBOARD_"


class DashboardSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    session_hours: float = Field(default=12.0, gt=0, le=24 * 30, description="lifetime of a sign-in")
    history_window_s: float = Field(
        default=3600.0, gt=0, le=7 * 86400, description="how far back the utilization charts go"
    )
    queue_poll_s: float = Field(
        default=1.0,
        gt=0,
        description="while a dashboard is open, how often queue decisions (position, wait reason) are checked",
    )
    recent_events: int = Field(default=60, ge=1, le=1000, description="events shown in the history table")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DashboardSettings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw:
                values[name] = raw
        return cls.model_validate(values)

"""Which respools request belongs to which ZenML step run, so that every process involved finds the same one.

The orchestrator, the step's own process (or pod) and ZenML's retries of the step all submit the same
request spec under the same idempotency key; the server answers them all with the one request. That is what
keeps a preempted step's place in the queue: respools requeues the request, and the retry, submitting under
the same key, gets the requeued request back instead of joining the end of the queue.

A request that ended for good (released after an ordinary failure, or out of retries) cannot be granted
again, so the next attempt moves on to a new *generation* of the key (``…#1``, ``…#2``).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zenml.models import PipelineRunResponse

log = logging.getLogger(__name__)

_MAX_KEY = 200
_MAX_LABEL = 63
_MAX_URL = 2048
RUN_URL_LABEL = "run_url"
"""The respools dashboard shows this label as a link to the run (the lease's way back to ZenML). Only run
level: a request outlives its step run (a retry is a new step run on the same request), and its labels are
part of the idempotent spec, so they cannot name one step run."""


@dataclass(frozen=True)
class StepIdentity:
    """One step of one pipeline run."""

    orchestrator_run_id: str
    step_name: str
    pipeline_name: str
    run_name: str | None = None
    user: str | None = None
    run_id: str | None = None
    run_url: str | None = None
    """The run's page on the ZenML dashboard, where the store is a ZenML server with one."""

    def request_key(self, generation: int = 0) -> str:
        """The idempotency key of the step's request (``generation`` > 0 after a request ended for good)."""
        base = f"zenml:{self.orchestrator_run_id}:{self.step_name}"
        if len(base) > _MAX_KEY - 8:
            base = "zenml:" + hashlib.sha256(base.encode()).hexdigest()
        return base if generation == 0 else f"{base}#{generation}"

    def labels(self) -> dict[str, str]:
        """Request labels (DESIGN §1: pipeline, run, step, user), shown on the dashboard and in the CLI."""
        labels = {
            "orchestrator": "zenml",
            "pipeline": _clip(self.pipeline_name),
            "run": _clip(self.run_name or self.orchestrator_run_id),
            "step": _clip(self.step_name),
        }
        if self.user:
            labels["user"] = _clip(self.user)
        if self.run_id:
            labels["zenml_run_id"] = self.run_id
        if self.run_url:
            labels[RUN_URL_LABEL] = self.run_url[:_MAX_URL]
        return labels


def _clip(value: str) -> str:
    return value if len(value) <= _MAX_LABEL else value[: _MAX_LABEL - 9] + "-" + _digest(value)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:8]


def run_url(run: PipelineRunResponse | None) -> str | None:
    """The run's ZenML dashboard page, or ``None`` (no run, or a store without a dashboard: a local one)."""
    if run is None:
        return None
    from zenml.utils.dashboard_utils import get_run_url

    try:
        return get_run_url(run)
    except Exception as exc:  # a link is a convenience; never fail a step for it
        log.debug("respools: no dashboard URL for run %s: %s", run.id, exc)
        return None

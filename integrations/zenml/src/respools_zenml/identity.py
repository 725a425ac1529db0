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
from dataclasses import dataclass

_MAX_KEY = 200
_MAX_LABEL = 63


@dataclass(frozen=True)
class StepIdentity:
    """One step of one pipeline run."""

    orchestrator_run_id: str
    step_name: str
    pipeline_name: str
    run_name: str | None = None
    user: str | None = None

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
        return labels


def _clip(value: str) -> str:
    return value if len(value) <= _MAX_LABEL else value[: _MAX_LABEL - 9] + "-" + _digest(value)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:8]

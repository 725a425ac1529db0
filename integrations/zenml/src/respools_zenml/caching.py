"""Whether ZenML would serve a step from its cache, asked before the step queues for GPUs.

A cached step runs no code, so queueing it for capacity (and, on Kubernetes, holding a granted lease that
no pod will ever use) only delays the run. ZenML computes the answer from the step's inputs in the
current run; this asks it the same way its Kubernetes orchestrator pod does. The check is an
optimization: whenever it cannot be made, the step is treated as not cached.
"""

from __future__ import annotations

import logging

from zenml.enums import ExecutionStatus
from zenml.models import PipelineRunResponse, PipelineSnapshotResponse
from zenml.orchestrators.step_run_utils import StepRunRequestFactory
from zenml.stack import Stack

log = logging.getLogger(__name__)


def would_be_cached(snapshot: PipelineSnapshotResponse, run: PipelineRunResponse | None, step_name: str) -> bool:
    if run is None or snapshot.stack is None:
        return False
    try:
        factory = StepRunRequestFactory(snapshot=snapshot, pipeline_run=run, stack=Stack.from_model(snapshot.stack))
        if not factory.has_caching_enabled(step_name):
            return False
        request = factory.create_request(step_name)
        factory.populate_request(request)
    except Exception as exc:  # an optimization only: never fail or skip a step because of it
        log.debug("respools: cache check for step %s failed (%s); queueing it", step_name, exc)
        return False
    return request.status == ExecutionStatus.CACHED

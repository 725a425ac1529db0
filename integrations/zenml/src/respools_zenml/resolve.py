"""One step's respools request, from everything that can say something about it.

Precedence, most specific first: :func:`respools_zenml.step` options; ZenML's ``ResourceSettings`` on the
step (or pipeline); the orchestrator's :class:`~respools_zenml.settings.RespoolsSettings` (step, pipeline,
then component config); ZenML's own defaults. The respools retry budget is ZenML's: a preempted step is
requeued by respools exactly as often as ZenML's ``StepRetryConfig`` will run it again, so the server never
keeps a requeued request that no step process will come back for.
"""

from __future__ import annotations

from zenml.config.step_configurations import StepConfiguration

from respools_zenml.demand import (
    ZENML_DEFAULT_PREEMPTIBLE,
    StepDemand,
    combine,
    map_resource_settings,
)
from respools_zenml.options import StepOptions
from respools_zenml.settings import RespoolsSettings


def zenml_max_retries(config: StepConfiguration) -> int:
    return config.retry.max_retries if config.retry is not None else 0


def step_demand(config: StepConfiguration, settings: RespoolsSettings) -> StepDemand | None:
    """The request for a step, or ``None`` for a step that runs without a lease."""
    decorated = StepOptions.from_extra(config.extra)
    mapped = map_resource_settings(config.resource_settings)
    if not mapped.resources and decorated is None and not settings.pool_all_steps:
        return None
    options = decorated or StepOptions()
    resources = combine(mapped.resources, options.resources, "respools_zenml.step(resources=...)", "ResourceSettings")
    preemptible = next(
        value
        for value in (options.preemptible, mapped.preemptible, settings.preemptible, ZENML_DEFAULT_PREEMPTIBLE)
        if value is not None
    )
    pool = options.pool or settings.pool
    return StepDemand(
        resources=resources or {"step_run": 1},
        preemptible=preemptible,
        stop_at_notice=preemptible and mapped.stop_at_notice and options.preemptible is None,
        allocation_wait_timeout_s=mapped.allocation_wait_timeout_s,
        initialization_lease_s=mapped.initialization_lease_s,
        priority=options.priority if options.priority is not None else settings.priority,
        max_retries=zenml_max_retries(config),
        pools=[pool] if pool else None,
        gpu_class=mapped.gpu_class,
        selectors=mapped.selectors,
        labels={**settings.labels, **options.labels},
    )

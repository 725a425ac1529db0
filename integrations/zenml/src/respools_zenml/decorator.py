"""``respools_zenml.step``: ``zenml.step`` plus what a step asks of the pools.

It only *records*: ZenML's ``ResourceSettings`` go where ZenML keeps them (``settings["resources"]``), the
respools-only options go to the step's ``extra`` (see :mod:`respools_zenml.options`), and ``max_retries``
becomes ZenML's ``StepRetryConfig`` (the pooled orchestrators requeue a preempted step through ZenML's
retries). The pooled orchestrators do the leasing, so a decorated step still runs unchanged, without a
lease, on any other stack.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, overload

import zenml
from zenml.config.resource_settings import ResourceSettings
from zenml.config.retry_config import StepRetryConfig
from zenml.enums import StepRuntime
from zenml.steps import BaseStep

from respools.model import GPU, mig_key
from respools_zenml.demand import DemandError, normalize_resources
from respools_zenml.options import EXTRA_KEY, StepOptions

RESOURCES_SETTINGS_KEY = "resources"


@overload
def step(_func: Callable[..., Any], /) -> BaseStep: ...


@overload
def step(
    *,
    resources: ResourceSettings | Mapping[str, float] | None = None,
    gpu: float | None = None,
    mig: str | None = None,
    preemptible: bool | None = None,
    priority: int | None = None,
    max_retries: int | None = None,
    pool: str | None = None,
    labels: Mapping[str, str] | None = None,
    **zenml_options: Any,
) -> Callable[[Callable[..., Any]], BaseStep]: ...


def step(
    _func: Callable[..., Any] | None = None,
    /,
    *,
    resources: ResourceSettings | Mapping[str, float] | None = None,
    gpu: float | None = None,
    mig: str | None = None,
    preemptible: bool | None = None,
    priority: int | None = None,
    max_retries: int | None = None,
    pool: str | None = None,
    labels: Mapping[str, str] | None = None,
    **zenml_options: Any,
) -> BaseStep | Callable[[Callable[..., Any]], BaseStep]:
    """A ZenML step that pooled orchestrators run under a respools lease.

    ``resources`` is ZenML's ``ResourceSettings`` or a respools vector (``{"gpu": 0.5}``,
    ``{"mig.3g.40gb": 1, "tensorrt_sessions": 2}``); ``gpu`` and ``mig`` are shorthands as in
    ``respools.lease``. ``preemptible`` lets the step borrow idle capacity at the risk of preemption;
    ``priority`` orders it among its subject's requests; ``max_retries`` is how often a failed or preempted
    step runs again (ZenML's ``StepRetryConfig``; a preempted step waits at its original queue position);
    ``pool`` names the pool. Every other keyword goes to ``zenml.step`` unchanged.
    """
    options, settings_resources = _options(resources, gpu, mig, preemptible, priority, pool, labels)
    forwarded = _zenml_options(zenml_options, options, settings_resources, max_retries)
    decorate: Callable[[Callable[..., Any]], BaseStep] = zenml.step(**forwarded)
    if _func is not None:
        return decorate(_func)
    return decorate


def _options(
    resources: ResourceSettings | Mapping[str, float] | None,
    gpu: float | None,
    mig: str | None,
    preemptible: bool | None,
    priority: int | None,
    pool: str | None,
    labels: Mapping[str, str] | None,
) -> tuple[StepOptions, ResourceSettings | None]:
    vector: dict[str, float] = {}
    settings_resources: ResourceSettings | None = None
    if isinstance(resources, ResourceSettings):
        settings_resources = resources
    elif resources is not None:
        vector.update(normalize_resources(resources))
    shorthands: dict[str, float] = {}
    if gpu is not None:
        shorthands[GPU] = gpu
    if mig is not None:
        shorthands[mig_key(mig)] = 1
    for key, amount in normalize_resources(shorthands, "gpu/mig").items():
        if key in vector:
            raise DemandError(f"{key} is given both in resources= and as a keyword; say it once")
        vector[key] = amount
    fields: dict[str, Any] = {
        "resources": vector or None,
        "preemptible": preemptible,
        "priority": priority,
        "pool": pool,
        "labels": dict(labels) if labels else None,
    }
    options = StepOptions.model_validate({key: value for key, value in fields.items() if value is not None})
    return options, settings_resources


def _zenml_options(
    zenml_options: Mapping[str, Any],
    options: StepOptions,
    settings_resources: ResourceSettings | None,
    max_retries: int | None,
) -> dict[str, Any]:
    forwarded = dict(zenml_options)
    # A dynamic pipeline runs a step inline (in its own process) unless told otherwise, where no lease can
    # be held; static pipelines ignore the runtime.
    forwarded.setdefault("runtime", StepRuntime.ISOLATED)
    extra = dict(forwarded.get("extra") or {})
    if EXTRA_KEY in extra:
        raise DemandError(f"extra[{EXTRA_KEY!r}] is written by respools_zenml.step; pass the options as keywords")
    extra[EXTRA_KEY] = options.to_extra()
    forwarded["extra"] = extra
    if settings_resources is not None:
        settings = dict(forwarded.get("settings") or {})
        if RESOURCES_SETTINGS_KEY in settings:
            raise DemandError("ResourceSettings given both as resources= and in settings['resources']; give one")
        settings[RESOURCES_SETTINGS_KEY] = settings_resources
        forwarded["settings"] = settings
    if max_retries is not None:
        forwarded["retry"] = _retry(forwarded.get("retry"), max_retries)
    return forwarded


def _retry(given: StepRetryConfig | None, max_retries: int) -> StepRetryConfig | None:
    if max_retries < 0:
        raise DemandError(f"max_retries must be >= 0, got {max_retries}")
    if given is not None:
        if given.max_retries != max_retries:
            raise DemandError(
                f"max_retries={max_retries} but retry=StepRetryConfig(max_retries={given.max_retries}); "
                "a preempted step is retried by ZenML's retry config, so give one number"
            )
        return given
    return StepRetryConfig(max_retries=max_retries) if max_retries else None

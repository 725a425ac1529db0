"""A pooled step's pod settings labelled for the respools Kubernetes controller (``respools-kubernetes
controller``), instead of a lease taken in ZenML's orchestrator pod.

Why: where the cluster runs the controller, it already holds every labelled GPU Job until respools grants
it, places it on the granted node, and on preemption suspends the Job (its pods get SIGTERM with the grace
left), puts the request back in the queue at its place with ``attempt + 1`` and unsuspends it on the next
grant. A ZenML step's Job is then retried after a preemption exactly as the local stack retries a step —
which an orchestrator-held lease cannot do (a Job's retry pod would keep the devices of a lease given
away). So the step's pod template carries what the controller reads — the pool, the subject, preemptible,
priority, max retries (annotations), and the GPUs as the device plugin's resources (limits) — and ZenML
creates the Job as usual; nothing waits in the orchestrator pod.
"""

from __future__ import annotations

from typing import Any

from zenml.integrations.kubernetes.pod_settings import KubernetesPodSettings

from respools.model import MCPU, MEMORY_MB
from respools_zenml.demand import StepDemand

ANNOTATION_PREFIX = "respools.io/"
GPU = "gpu"
GPU_MEMORY_MB = "gpu_memory_mb"
MIG_PREFIX = "mig."


class ControllerLabelError(ValueError):
    """The step cannot be expressed for the controller; the message says why."""


def pod_resources(resources: dict[str, float]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """The step's wire-form resources as the controller reads them from a pod: (limits, requests,
    annotations). Whole GPUs and MIG slices are device-plugin limits; a share of one GPU is the
    ``respools.io/gpu-fraction`` annotation (and ``gpu-memory-mb``)."""
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for key, amount in resources.items():
        if key == GPU and amount >= 1:
            if amount != int(amount):
                raise ControllerLabelError(f"gpu={amount}: ask for whole GPUs, or a share of one below 1")
            limits["nvidia.com/gpu"] = str(int(amount))
        elif key == GPU:
            annotations[ANNOTATION_PREFIX + "gpu-fraction"] = str(amount)
        elif key == GPU_MEMORY_MB:
            annotations[ANNOTATION_PREFIX + "gpu-memory-mb"] = str(int(amount))
        elif key.startswith(MIG_PREFIX):
            limits["nvidia.com/mig-" + key.removeprefix(MIG_PREFIX)] = str(int(amount))
        elif key == MCPU:
            requests["cpu"] = f"{int(amount)}m"
        elif key == MEMORY_MB:
            requests["memory"] = f"{int(amount)}Mi"
    return limits, requests, annotations


def asks_for_gpus(resources: dict[str, float]) -> bool:
    return any(key == GPU or key.startswith(MIG_PREFIX) for key in resources)


def labelled_pod_settings(
    demand: StepDemand, base: KubernetesPodSettings | None, *, subject: str | None
) -> KubernetesPodSettings:
    """``base`` plus what the controller reads; what the user's pod settings say wins where both speak."""
    settings = base or KubernetesPodSettings()
    limits, requests, resource_notes = pod_resources(demand.resources)
    notes: dict[str, str] = {
        **resource_notes,
        ANNOTATION_PREFIX + "preemptible": "true" if demand.preemptible else "false",
        ANNOTATION_PREFIX + "priority": str(demand.priority),
    }
    if demand.pools:
        notes[ANNOTATION_PREFIX + "pool"] = demand.pools[0]
    if subject:
        notes[ANNOTATION_PREFIX + "subject"] = subject
    if demand.max_retries:  # else the controller's default for Jobs: one out of retries stays suspended
        notes[ANNOTATION_PREFIX + "max-retries"] = str(demand.max_retries)
    resources: dict[str, Any] = dict(settings.resources or {})
    resources["limits"] = {**limits, **(resources.get("limits") or {})}
    resources["requests"] = {**requests, **(resources.get("requests") or {})}
    resources = {key: value for key, value in resources.items() if value}
    return settings.model_copy(update={"annotations": {**notes, **settings.annotations}, "resources": resources})

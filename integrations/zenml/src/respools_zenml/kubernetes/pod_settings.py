"""A granted lease, realized into the ``KubernetesPodSettings`` of the step's pod.

The Kubernetes backend (``respools_kubernetes``) already knows how a lease is spelled on a cluster (whole
GPUs, MIG slices under either device-plugin strategy, HAMi or Run:ai fractions, node pinning, tolerations)
and how to merge that into a pod without overriding what the pod says. This module only carries ZenML's
pod settings across: it builds the pod those settings describe, lets ``respools_kubernetes.apply_to_pod``
merge the lease's fragment into it, and reads the result back into pod settings. Everything passes through
the ``kubernetes`` client's models both ways, so a field the API lacks fails here, not on the cluster.

The lease's ``mcpu`` and ``memory_mb`` become the container's CPU and memory *requests* where the pod
settings give none, so the cluster's scheduler reserves what respools accounted for.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import V1Container, V1ObjectMeta, V1Pod, V1PodSpec
from respools_kubernetes import KubernetesBackend, apply_to_pod
from respools_kubernetes.api_json import from_api_json, to_api_json
from zenml.integrations.kubernetes.pod_settings import KubernetesPodSettings

from respools.model import MCPU, MEMORY_MB, Lease, PoolSpec

STEP_CONTAINER = "main"
"""The container ZenML's Kubernetes orchestrator runs a step in."""


class PodSettingsError(ValueError):
    """The lease cannot be given to the step's pod; the message says why."""


def realize_pod_settings(
    lease: Lease, pool: PoolSpec, base: KubernetesPodSettings | None, env: dict[str, str] | None = None
) -> KubernetesPodSettings:
    """``base`` plus what the step's pod needs to hold ``lease`` (and ``env``, e.g. how to find the lease)."""
    if pool.stack != KubernetesBackend.name:
        raise PodSettingsError(
            f"lease {lease.id} is on pool {pool.name!r} of stack {pool.stack!r}; the pooled Kubernetes "
            "orchestrator needs a pool of stack 'kubernetes' (set pool= on the orchestrator or the step)"
        )
    fragments: list[dict[str, Any]] = KubernetesBackend().realize(lease, pool).native["pods"]
    if len(fragments) != 1:
        raise PodSettingsError(
            f"lease {lease.id} spans {len(fragments)} hosts, but a ZenML step runs in one pod; "
            "ask for what one node holds"
        )
    settings = base or KubernetesPodSettings()
    pod = apply_to_pod(_pod_of(settings), fragments[0], STEP_CONTAINER)
    merged = _settings_of(pod, settings)
    resources = _with_requests(merged.resources, lease)
    env_vars = [*merged.env, *({"name": name, "value": value} for name, value in sorted((env or {}).items()))]
    return merged.model_copy(update={"resources": resources, "env": env_vars})


def _pod_of(settings: KubernetesPodSettings) -> V1Pod:
    container = V1Container(
        name=STEP_CONTAINER,
        resources=from_api_json(settings.resources, "V1ResourceRequirements") if settings.resources else None,
        env=from_api_json(settings.env, "list[V1EnvVar]") if settings.env else None,
    )
    spec = V1PodSpec(
        containers=[container],
        node_selector=dict(settings.node_selectors) or None,
        affinity=from_api_json(settings.affinity, "V1Affinity") if settings.affinity else None,
        tolerations=from_api_json(settings.tolerations, "list[V1Toleration]") if settings.tolerations else None,
        scheduler_name=settings.scheduler_name,
    )
    meta = V1ObjectMeta(labels=dict(settings.labels) or None, annotations=dict(settings.annotations) or None)
    return V1Pod(metadata=meta, spec=spec)


def _settings_of(pod: V1Pod, base: KubernetesPodSettings) -> KubernetesPodSettings:
    spec: V1PodSpec = pod.spec
    container: V1Container = spec.containers[0]
    meta: V1ObjectMeta = pod.metadata
    update: dict[str, Any] = {
        "node_selectors": dict(spec.node_selector or {}),
        "affinity": to_api_json(spec.affinity) if spec.affinity is not None else {},
        "tolerations": to_api_json(spec.tolerations or []),
        "resources": to_api_json(container.resources) if container.resources is not None else {},
        "env": to_api_json(container.env or []),
        "labels": dict(meta.labels or {}),
        "annotations": dict(meta.annotations or {}),
        "scheduler_name": spec.scheduler_name,
    }
    return KubernetesPodSettings.model_validate({**base.model_dump(), **update})


def _with_requests(resources: dict[str, Any], lease: Lease) -> dict[str, Any]:
    """Add CPU and memory requests from the lease where the pod settings leave them out; extended
    resources (GPUs) go to limits, and Kubernetes derives their requests from there."""
    requests = dict(resources.get("requests") or {})
    if MCPU in lease.resources and "cpu" not in requests:
        requests["cpu"] = f"{lease.resources[MCPU]}m"
    if MEMORY_MB in lease.resources and "memory" not in requests:
        requests["memory"] = f"{lease.resources[MEMORY_MB]}M"  # decimal megabytes, as ZenML counts them
    if not requests:
        return resources
    return {**resources, "requests": requests}

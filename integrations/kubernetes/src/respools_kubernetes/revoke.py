"""Stopping a lease's workload on Kubernetes: delete its pods, and the Job that would recreate them.

``stop`` runs when a preemption deadline has passed, after the workload was told and given its grace, so
deletion is immediate (grace period 0, as ``respools run`` sends SIGKILL at the deadline). A pod owned by a
Job is deleted together with its Job; deleting the pod alone would make the Job controller start a new
one that holds GPUs without a lease.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client import BatchV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from respools_kubernetes.labels import LEASE_LABEL

_NOT_FOUND = 404


@dataclass(frozen=True)
class Deleted:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


def delete_lease_workload(core: CoreV1Api, batch: BatchV1Api, namespace: str, lease_id: str) -> list[Deleted]:
    """Delete the pods labelled with ``lease_id`` (and their Jobs); what was deleted, in order.

    Objects already gone count as stopped: ``stop`` may run twice, or race the workload's own exit.
    """
    pods = core.list_namespaced_pod(namespace, label_selector=f"{LEASE_LABEL}={lease_id}").items
    deleted: list[Deleted] = []
    for pod in pods:
        # The selector did the filtering; this guards against deleting someone else's pod if it did not.
        if (pod.metadata.labels or {}).get(LEASE_LABEL) != lease_id:
            continue
        job = _owning_job(pod)
        if job is not None and Deleted("job", namespace, job) not in deleted and _delete_job(batch, namespace, job):
            deleted.append(Deleted("job", namespace, job))
        name = pod.metadata.name
        if _delete(core.delete_namespaced_pod, name, namespace, grace_period_seconds=0):
            deleted.append(Deleted("pod", namespace, name))
    return deleted


def lease_pods_left(core: CoreV1Api, namespace: str, lease_id: str) -> list[str]:
    """Names of the pods labelled with ``lease_id`` that still exist, terminating ones included: their
    containers may still hold the GPUs, which the device plugin frees only once the pod is gone."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"{LEASE_LABEL}={lease_id}").items
    return sorted(str(pod.metadata.name) for pod in pods if (pod.metadata.labels or {}).get(LEASE_LABEL) == lease_id)


def _owning_job(pod: Any) -> str | None:
    for owner in pod.metadata.owner_references or []:
        if owner.controller and owner.kind == "Job" and owner.api_version == "batch/v1":
            return str(owner.name)
    return None


def _delete_job(batch: BatchV1Api, namespace: str, name: str) -> bool:
    return _delete(
        batch.delete_namespaced_job, name, namespace, grace_period_seconds=0, propagation_policy="Background"
    )


def _delete(call: Callable[..., Any], name: str, namespace: str, **options: Any) -> bool:
    """Call a client ``delete_namespaced_*`` method; False when the object was already gone."""
    try:
        call(name, namespace, **options)
    except ApiException as exc:
        if exc.status == _NOT_FOUND:
            return False
        raise
    return True

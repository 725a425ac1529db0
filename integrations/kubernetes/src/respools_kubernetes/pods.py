"""Merging a pod fragment (see :mod:`respools_kubernetes.fragment`) into the step's own pod.

The step's orchestrator owns the pod (image, command, volumes); respools owns only its GPU request and
placement. The merge therefore *adds* to what the pod has: node affinity is ANDed into every existing
term, tolerations and labels are added, and a clash that no pod could satisfy (two schedulers, two values
for one node label) is an error rather than a silent override.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kubernetes.client import (
    V1Affinity,
    V1Container,
    V1NodeAffinity,
    V1NodeSelector,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1ResourceRequirements,
)

from respools.backends.protocol import BackendError
from respools_kubernetes.api_json import from_api_json, to_api_json
from respools_kubernetes.fragment import HAMI_MEMORY_PERCENTAGE_RESOURCE, HAMI_MEMORY_RESOURCE

_DEFAULT_SCHEDULER = "default-scheduler"
_EXCLUSIVE_RESOURCES = {
    HAMI_MEMORY_RESOURCE: HAMI_MEMORY_PERCENTAGE_RESOURCE,
    HAMI_MEMORY_PERCENTAGE_RESOURCE: HAMI_MEMORY_RESOURCE,
}
"""HAMi rejects a container that asks for both."""


def apply_to_pod(pod: V1Pod, fragment: Mapping[str, Any], container: str | None = None) -> V1Pod:
    """A copy of ``pod`` that holds the lease ``fragment`` describes.

    ``container`` names the container that runs the step; it may be left out when the pod has one.
    """
    merged = apply_placement(pod, fragment)
    assert merged.spec is not None  # apply_placement refuses a pod without one
    _merge_scheduler(merged.spec, fragment.get("spec", {}).get("schedulerName"))
    container_part = fragment.get("container", {})
    target = _container(merged.spec, container)
    _merge_resources(target, from_api_json(container_part.get("resources", {}), "V1ResourceRequirements"))
    _merge_env(target, container_part.get("env", []))
    return merged


def apply_placement(pod: V1Pod, fragment: Mapping[str, Any]) -> V1Pod:
    """A copy of ``pod`` with only the fragment's labels, annotations, node selection and tolerations.

    These are the parts Kubernetes lets a controller change on a workload that already exists (a
    suspended Job's template, a scheduling-gated Pod); container resources and the scheduler are fixed
    at creation, so the controller admits workloads that already ask for their devices.
    """
    merged: V1Pod = copy.deepcopy(pod)
    if merged.spec is None:
        raise BackendError("the pod has no spec to merge the lease into")
    if merged.metadata is None:
        merged.metadata = V1ObjectMeta()
    _merge_metadata(merged.metadata, fragment.get("metadata", {}))
    spec_part = fragment.get("spec", {})
    _merge_node_selector(merged.spec, spec_part.get("nodeSelector", {}))
    if "affinity" in spec_part:
        _merge_affinity(merged.spec, from_api_json(spec_part["affinity"], "V1Affinity"))
    _merge_tolerations(merged.spec, spec_part.get("tolerations", []))
    return merged


def _merge_metadata(meta: V1ObjectMeta, part: Mapping[str, Any]) -> None:
    meta.labels = {**(meta.labels or {}), **part.get("labels", {})}
    meta.annotations = {**(meta.annotations or {}), **part.get("annotations", {})}


def _merge_node_selector(spec: V1PodSpec, wanted: Mapping[str, str]) -> None:
    current = dict(spec.node_selector or {})
    for key, value in wanted.items():
        if key in current and current[key] != value:
            raise BackendError(
                f"the pod's nodeSelector has {key}={current[key]!r} but the lease is placed on "
                f"{key}={value!r}; no node satisfies both"
            )
        current[key] = value
    spec.node_selector = current or None


def _merge_affinity(spec: V1PodSpec, wanted: V1Affinity) -> None:
    """AND the lease's required node terms into each of the pod's (terms are ORed, expressions ANDed)."""
    ours = wanted.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    expressions = [expr for term in ours for expr in term.match_expressions or []]
    affinity = spec.affinity or V1Affinity()
    node_affinity = affinity.node_affinity or V1NodeAffinity()
    required = node_affinity.required_during_scheduling_ignored_during_execution
    if required is None or not required.node_selector_terms:
        required = V1NodeSelector(node_selector_terms=ours)
    else:
        for term in required.node_selector_terms:
            present = [to_api_json(expr) for expr in term.match_expressions or []]
            added = [copy.deepcopy(expr) for expr in expressions if to_api_json(expr) not in present]
            term.match_expressions = [*(term.match_expressions or []), *added]
    node_affinity.required_during_scheduling_ignored_during_execution = required
    affinity.node_affinity = node_affinity
    spec.affinity = affinity


def _merge_tolerations(spec: V1PodSpec, wanted: list[dict[str, Any]]) -> None:
    current = list(spec.tolerations or [])
    present = [to_api_json(toleration) for toleration in current]
    for toleration in wanted:
        if toleration not in present:
            current.append(from_api_json(toleration, "V1Toleration"))
            present.append(toleration)
    spec.tolerations = current or None


def _merge_scheduler(spec: V1PodSpec, wanted: str | None) -> None:
    if wanted is None:
        return
    if spec.scheduler_name not in (None, _DEFAULT_SCHEDULER, wanted):
        raise BackendError(
            f"the pod asks for scheduler {spec.scheduler_name!r} but the lease's GPU sharing needs {wanted!r}"
        )
    spec.scheduler_name = wanted


def _container(spec: V1PodSpec, name: str | None) -> V1Container:
    containers: list[V1Container] = list(spec.containers or [])
    if name is not None:
        for candidate in containers:
            if candidate.name == name:
                return candidate
        raise BackendError(f"the pod has no container named {name!r}")
    if len(containers) != 1:
        raise BackendError(
            f"the pod has {len(containers)} containers; name the one that runs the step to give it the GPUs"
        )
    return containers[0]


def _merge_resources(container: V1Container, wanted: V1ResourceRequirements) -> None:
    resources = container.resources or V1ResourceRequirements()
    limits = dict(resources.limits or {})
    requests = dict(resources.requests or {})
    for key, value in (wanted.limits or {}).items():
        exclusive = _EXCLUSIVE_RESOURCES.get(key)
        if exclusive is not None:
            limits.pop(exclusive, None)
            requests.pop(exclusive, None)
        limits[key] = value
        if key in requests:
            requests[key] = value  # extended resources need requests equal to limits
    resources.limits = limits or None
    resources.requests = requests or None
    container.resources = resources


def _merge_env(container: V1Container, wanted: list[dict[str, Any]]) -> None:
    names = {var["name"] for var in wanted}
    kept = [var for var in container.env or [] if var.name not in names]
    container.env = [*kept, *from_api_json(wanted, "list[V1EnvVar]")] or None

"""Merging a lease's fragment into a pod the orchestrator already shaped: add, never silently override."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import (
    V1Affinity,
    V1Container,
    V1EnvVar,
    V1NodeAffinity,
    V1NodeSelector,
    V1NodeSelectorRequirement,
    V1NodeSelectorTerm,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1ResourceRequirements,
    V1Toleration,
)
from respools_kubernetes import apply_to_pod

from respools.backends.protocol import BackendError

PRODUCT = {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"]}


def fragment(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "host": "gpu-node-1",
        "metadata": {"labels": {"respools.io/lease-id": "lease-1"}, "annotations": {"respools.io/pool": "k8s"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "gpu-node-1"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [PRODUCT]}]
                    }
                }
            },
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "container": {
            "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480"}},
            "env": [{"name": "RESPOOLS_LEASE_ID", "value": "lease-1"}],
        },
    }
    base["spec"].update(overrides)
    return base


def pod(*containers: V1Container, **spec: Any) -> V1Pod:
    main = V1Container(name="main", image="python:3.11")
    return V1Pod(metadata=V1ObjectMeta(name="step"), spec=V1PodSpec(containers=list(containers or [main]), **spec))


def zone_term(zone: str) -> V1NodeSelectorTerm:
    requirement = V1NodeSelectorRequirement(key="topology.kubernetes.io/zone", operator="In", values=[zone])
    return V1NodeSelectorTerm(match_expressions=[requirement])


def test_the_lease_requirement_is_anded_into_every_existing_node_affinity_term() -> None:
    terms = V1NodeSelector(node_selector_terms=[zone_term("a"), zone_term("b")])
    original = pod(
        affinity=V1Affinity(node_affinity=V1NodeAffinity(required_during_scheduling_ignored_during_execution=terms))
    )

    merged = apply_to_pod(original, fragment())

    required = merged.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    keys = [[expr.key for expr in term.match_expressions] for term in required.node_selector_terms]
    assert keys == [["topology.kubernetes.io/zone", "nvidia.com/gpu.product"]] * 2
    # the caller's pod is left as it was
    assert (
        len(
            original.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms[
                0
            ].match_expressions
        )
        == 1
    )


def test_a_node_selector_no_node_can_satisfy_together_with_the_placement_is_an_error() -> None:
    with pytest.raises(BackendError, match=r"no node satisfies both"):
        apply_to_pod(pod(node_selector={"kubernetes.io/hostname": "cpu-node"}), fragment())


def test_a_different_scheduler_than_the_sharing_layer_needs_is_an_error() -> None:
    with pytest.raises(BackendError, match=r"runai-scheduler"):
        apply_to_pod(pod(scheduler_name="volcano"), fragment(schedulerName="runai-scheduler"))
    merged = apply_to_pod(pod(scheduler_name="default-scheduler"), fragment(schedulerName="runai-scheduler"))
    assert merged.spec.scheduler_name == "runai-scheduler"


def test_hami_memory_replaces_a_percentage_the_pod_had_and_requests_follow_limits() -> None:
    resources = V1ResourceRequirements(
        limits={"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50", "memory": "8Gi"},
        requests={"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50", "cpu": "2"},
    )
    merged = apply_to_pod(pod(V1Container(name="main", image="python:3.11", resources=resources)), fragment())

    container = merged.spec.containers[0]
    assert container.resources.limits == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480", "memory": "8Gi"}
    assert container.resources.requests == {"nvidia.com/gpu": "1", "cpu": "2"}


def test_the_named_container_gets_the_gpus_and_a_sidecar_does_not() -> None:
    sidecar = V1Container(name="log-shipper", image="fluent-bit")
    main = V1Container(name="main", image="python:3.11", env=[V1EnvVar(name="RESPOOLS_LEASE_ID", value="stale")])
    with pytest.raises(BackendError, match=r"name the one that runs the step"):
        apply_to_pod(pod(main, sidecar), fragment())

    merged = apply_to_pod(pod(main, sidecar), fragment(), container="main")

    gpu_main, plain_sidecar = merged.spec.containers
    assert gpu_main.resources.limits["nvidia.com/gpu"] == "1"
    assert [(var.name, var.value) for var in gpu_main.env] == [("RESPOOLS_LEASE_ID", "lease-1")]
    assert plain_sidecar.resources is None
    with pytest.raises(BackendError, match=r"no container named 'trainer'"):
        apply_to_pod(pod(main, sidecar), fragment(), container="trainer")


def test_tolerations_and_labels_are_added_once() -> None:
    gpu_taint = V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
    merged = apply_to_pod(pod(tolerations=[gpu_taint]), fragment())
    merged = apply_to_pod(merged, fragment())

    assert len(merged.spec.tolerations) == 1
    (term,) = merged.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert [expr.key for expr in term.match_expressions] == ["nvidia.com/gpu.product"]
    assert merged.metadata.labels == {"respools.io/lease-id": "lease-1"}
    assert merged.spec.node_selector == {"kubernetes.io/hostname": "gpu-node-1"}

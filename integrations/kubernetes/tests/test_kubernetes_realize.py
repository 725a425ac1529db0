"""Leases → pod fragments, each merged into a realistic pod and checked against the Kubernetes schemas."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest
from kubernetes.client import V1Container, V1ObjectMeta, V1Pod, V1PodSpec
from respools_kubernetes import KubernetesBackend, apply_to_pod
from respools_kubernetes.api_json import from_api_json, to_api_json

from respools.backends.protocol import BackendError
from respools.model import Lease, PoolSpec

SCHEMA_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())

A100_UUID = "GPU-5f6a0b1c-1111-2222-3333-444455556666"
INVENTORY = [
    {
        "name": "gpu-node-1",
        "labels": {"kubernetes.io/hostname": "gpu-node-1.cluster.internal"},
        "gpus": [
            {"uuid": A100_UUID, "index": 0, "model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920},
            {"uuid": "GPU-0002", "index": 1, "model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920},
            {
                "uuid": "GPU-0003",
                "index": 2,
                "model": "NVIDIA A100-SXM4-80GB",
                "memory_mb": 81920,
                "mig_enabled": True,
                "mig_instances": [{"uuid": "MIG-0003-a", "profile": "3g.40gb"}],
            },
        ],
    },
    {
        "name": "gpu-node-2",
        "gpus": [{"uuid": "GPU-0004", "index": 0, "model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920}],
    },
]

MakeLease = Callable[..., Lease]
MakePool = Callable[..., PoolSpec]


def step_pod() -> V1Pod:
    """A pod as an orchestrator would build it, before respools adds the lease."""
    return V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=V1ObjectMeta(name="train-step", namespace="ml", labels={"pipeline": "train"}),
        spec=V1PodSpec(
            containers=[V1Container(name="main", image="python:3.11", command=["python", "train.py"])],
            restart_policy="Never",
        ),
    )


def realized_pods(backend: KubernetesBackend, lease: Lease, pool: PoolSpec) -> list[dict[str, Any]]:
    """Realize, merge every fragment into a step pod, and require each pod to pass the schemas."""
    realization = backend.realize(lease, pool)
    pods = []
    for fragment in realization.native["pods"]:
        pod = to_api_json(apply_to_pod(step_pod(), fragment))
        for version in SCHEMA_VERSIONS:
            kubernetes_validate.validate(pod, version, strict=True)
        assert to_api_json(from_api_json(pod, "V1Pod")) == pod  # reads back into the client's models
        pods.append(pod)
    return pods


def limits(pod: dict[str, Any]) -> dict[str, str]:
    result: dict[str, str] = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
    return result


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {var["name"]: var["value"] for var in pod["spec"]["containers"][0].get("env", [])}


def product_values(pod: dict[str, Any]) -> list[str]:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = terms["nodeSelectorTerms"]
    (expression,) = [e for e in term["matchExpressions"] if e["key"] == "nvidia.com/gpu.product"]
    assert expression["operator"] == "In"
    values: list[str] = expression["values"]
    return values


def test_whole_gpus_are_counted_pinned_to_the_placed_node_and_tolerate_the_gpu_taint(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    items = [
        {"host": "gpu-node-1", "gpu_uuid": A100_UUID, "gpu_index": 0},
        {"host": "gpu-node-1", "gpu_uuid": "GPU-0002", "gpu_index": 1},
    ]
    lease = make_lease({"gpu": 2}, items=items)
    (pod,) = realized_pods(KubernetesBackend(), lease, make_pool(inventory=INVENTORY))

    assert limits(pod) == {"nvidia.com/gpu": "2"}
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-1.cluster.internal"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    assert pod["metadata"]["labels"] == {"pipeline": "train", "respools.io/lease-id": "lease-1"}
    assert pod["metadata"]["annotations"]["respools.io/pool"] == "k8s"
    assert pod["metadata"]["annotations"]["respools.io/subject"] == "team-a"
    assert env(pod) == {"RESPOOLS_LEASE_ID": "lease-1"}


def test_a_lease_without_placement_asks_for_its_count_on_the_pools_nodes(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    pool = make_pool(settings={"node_selector": {"pool": "a100"}})
    (pod,) = realized_pods(KubernetesBackend(), make_lease({"gpu": 4}), pool)

    assert limits(pod) == {"nvidia.com/gpu": "4"}
    assert pod["spec"]["nodeSelector"] == {"pool": "a100"}


def test_a_gang_gets_one_pod_per_placed_host(make_lease: MakeLease, make_pool: MakePool) -> None:
    items = [
        {"host": "gpu-node-2", "gpu_uuid": "GPU-0004", "gpu_index": 0},
        {"host": "gpu-node-1", "gpu_uuid": A100_UUID, "gpu_index": 0},
    ]
    pods = realized_pods(KubernetesBackend(), make_lease({"gpu": 2}, items=items), make_pool(inventory=INVENTORY))

    assert [pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] for pod in pods] == [
        "gpu-node-1.cluster.internal",
        "gpu-node-2",
    ]
    assert all(limits(pod) == {"nvidia.com/gpu": "1"} for pod in pods)


def test_mig_slice_under_the_mixed_strategy_is_its_own_resource(make_lease: MakeLease, make_pool: MakePool) -> None:
    items = [
        {"host": "gpu-node-1", "gpu_uuid": "GPU-0003", "gpu_index": 2}
        | {"mig_uuid": "MIG-0003-a", "mig_profile": "3g.40gb"}
    ]
    lease = make_lease({"mig.3g.40gb": 1}, items=items)
    (pod,) = realized_pods(KubernetesBackend(), lease, make_pool(inventory=INVENTORY))

    assert limits(pod) == {"nvidia.com/mig-3g.40gb": "1"}
    assert "affinity" not in pod["spec"]


def test_mig_slice_under_the_single_strategy_selects_the_mig_product_in_every_spelling(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    items = [
        {"host": "gpu-node-1", "gpu_uuid": "GPU-0003", "gpu_index": 2}
        | {"mig_uuid": "MIG-0003-a", "mig_profile": "3g.40gb"}
    ]
    pool = make_pool(inventory=INVENTORY, settings={"mig_strategy": "single"})
    (pod,) = realized_pods(KubernetesBackend(), make_lease({"mig.3g.40gb": 1}, items=items), pool)

    assert limits(pod) == {"nvidia.com/gpu": "1"}
    assert product_values(pod) == [
        "A100-SXM4-80GB-MIG-3g.40gb",
        "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
    ]


def test_single_strategy_mig_without_a_known_model_is_refused_and_the_products_setting_supplies_it(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    lease = make_lease({"mig.1g.10gb": 1})
    with pytest.raises(BackendError, match=r"gpu_products"):
        KubernetesBackend().realize(lease, make_pool(settings={"mig_strategy": "single"}))

    pool = make_pool(settings={"mig_strategy": "single", "gpu_products": ["NVIDIA-H100-80GB-HBM3"]})
    (pod,) = realized_pods(KubernetesBackend(), lease, pool)
    assert "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb" in product_values(pod)


def test_hami_fraction_caps_memory_in_mib_and_pins_the_placed_gpu_uuid(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    items = [{"host": "gpu-node-1", "gpu_uuid": A100_UUID, "gpu_index": 0, "milli": 250}]
    pool = make_pool(inventory=INVENTORY, settings={"fraction_mode": "hami"})
    (pod,) = realized_pods(KubernetesBackend(), make_lease({"gpu": 0.25}, items=items), pool)

    assert limits(pod) == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480"}
    assert pod["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] == A100_UUID
    # HAMi enforces the cap and shows the pod a 20 GiB GPU: framework caps would shrink it again.
    assert env(pod) == {"RESPOOLS_LEASE_ID": "lease-1"}


def test_hami_fraction_of_unknown_memory_uses_the_percentage_never_both(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    pool = make_pool(settings={"fraction_mode": "hami"})
    (pod,) = realized_pods(KubernetesBackend(), make_lease({"gpu": 0.25}), pool)

    assert limits(pod) == {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"}
    assert "nvidia.com/use-gpuuuid" not in pod["metadata"]["annotations"]


def test_runai_fraction_is_an_annotation_for_the_runai_scheduler_with_caps_in_the_environment(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    items = [{"host": "gpu-node-1", "gpu_uuid": A100_UUID, "gpu_index": 0, "milli": 250, "memory_mb": 16384}]
    pool = make_pool(inventory=INVENTORY, settings={"fraction_mode": "runai"})
    lease = make_lease({"gpu": 0.25}, items=items)
    realization = KubernetesBackend().realize(lease, pool)
    (pod,) = realized_pods(KubernetesBackend(), lease, pool)

    assert pod["metadata"]["annotations"]["gpu-fraction"] == "0.25"
    assert pod["spec"]["schedulerName"] == "runai-scheduler"
    assert limits(pod) == {}
    assert env(pod) == realization.env
    assert realization.env["RESPOOLS_GPU_FRACTION"] == "0.25"
    assert realization.env["RESPOOLS_GPU_MEMORY_MB"] == "16384"
    assert realization.env["RESPOOLS_GPU_MEMORY_FRACTION"] == "0.2"
    assert realization.env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.2"
    assert any("not memory-enforced" in note for note in realization.notes)


def test_the_scheduler_name_setting_wins_over_the_runai_default(make_lease: MakeLease, make_pool: MakePool) -> None:
    pool = make_pool(settings={"fraction_mode": "runai", "scheduler_name": "kai-scheduler"})
    (pod,) = realized_pods(KubernetesBackend(), make_lease({"gpu": 0.5}), pool)

    assert pod["spec"]["schedulerName"] == "kai-scheduler"
    assert pod["metadata"]["annotations"]["gpu-fraction"] == "0.5"


def test_a_pool_without_a_sharing_layer_refuses_fractions_naming_the_forms_it_supports(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    backend = KubernetesBackend()
    pool = make_pool()
    assert backend.effective_forms(pool) == {"whole", "mig"}
    with pytest.raises(BackendError, match=r"cannot express fraction; it supports mig, whole"):
        backend.realize(make_lease({"gpu": 0.5}), pool)
    with pytest.raises(BackendError, match=r"fraction_mode"):
        backend.validate_pool(make_pool(forms=["whole", "fraction"]))


def test_a_pool_limited_to_whole_gpus_refuses_mig(make_lease: MakeLease, make_pool: MakePool) -> None:
    pool = make_pool(forms=["whole"])
    with pytest.raises(BackendError, match=r"cannot express mig; it supports whole"):
        KubernetesBackend().realize(make_lease({"mig.1g.10gb": 1}), pool)


@pytest.mark.parametrize(
    ("resources", "items", "reason"),
    [
        ({"gpu": 1.5}, None, "neither whole GPUs nor one fraction"),
        (
            {"gpu": 0.5},
            [
                {"host": "gpu-node-1", "gpu_uuid": A100_UUID, "gpu_index": 0, "milli": 250},
                {"host": "gpu-node-1", "gpu_uuid": "GPU-0002", "gpu_index": 1, "milli": 250},
            ],
            "2 GPU fractions on one host",
        ),
        (
            {"gpu": 1.25},
            [
                {"host": "gpu-node-1", "gpu_uuid": A100_UUID, "gpu_index": 0},
                {"host": "gpu-node-1", "gpu_uuid": "GPU-0002", "gpu_index": 1, "milli": 250},
            ],
            "fraction next to whole GPUs",
        ),
    ],
)
def test_shapes_no_pod_can_ask_for_are_refused_with_the_reason(
    make_lease: MakeLease,
    make_pool: MakePool,
    resources: dict[str, float],
    items: list[dict[str, Any]] | None,
    reason: str,
) -> None:
    pool = make_pool(inventory=INVENTORY, settings={"fraction_mode": "hami"})
    with pytest.raises(BackendError, match=reason):
        KubernetesBackend().realize(make_lease(resources, items=items), pool)


def test_several_profiles_under_the_single_strategy_are_refused(make_lease: MakeLease, make_pool: MakePool) -> None:
    pool = make_pool(settings={"mig_strategy": "single", "gpu_products": ["A100-SXM4-80GB"]})
    with pytest.raises(BackendError, match=r"single MIG strategy"):
        KubernetesBackend().realize(make_lease({"mig.1g.10gb": 1, "mig.3g.40gb": 1}), pool)


def test_a_lease_id_kubernetes_cannot_label_is_refused(make_lease: MakeLease, make_pool: MakePool) -> None:
    with pytest.raises(BackendError, match=r"label value"):
        KubernetesBackend().realize(make_lease({"gpu": 1}, id="lease/1"), make_pool())


def test_settings_are_strict(make_pool: MakePool) -> None:
    with pytest.raises(BackendError, match=r"fraction_mod: Extra inputs are not permitted"):
        KubernetesBackend().validate_pool(make_pool(settings={"fraction_mod": "hami"}))
    with pytest.raises(BackendError, match=r"fraction_mode"):
        KubernetesBackend().validate_pool(make_pool(settings={"fraction_mode": "mps"}))


def test_extra_tolerations_from_settings_are_added(make_lease: MakeLease, make_pool: MakePool) -> None:
    toleration = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    pool = make_pool(settings={"tolerations": [toleration]})
    KubernetesBackend().validate_pool(pool)
    (pod,) = realized_pods(KubernetesBackend(), make_lease({"gpu": 1}), pool)

    assert toleration in pod["spec"]["tolerations"]
    with pytest.raises(BackendError, match=r"tolerations\[0\] has fields a Toleration does not have"):
        KubernetesBackend().validate_pool(make_pool(settings={"tolerations": [{"key": "gpu", "efect": "NoSchedule"}]}))

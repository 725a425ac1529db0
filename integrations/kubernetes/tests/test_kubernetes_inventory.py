"""Node objects (as the API serves them) → hosts, for the label sets the NVIDIA stack and HAMi produce."""

from __future__ import annotations

import json
from typing import Any

import pytest
from respools_kubernetes.api_json import from_api_json
from respools_kubernetes.inventory import host_from_node
from respools_kubernetes.settings import KubernetesSettings

from respools.backends.protocol import BackendError
from respools.model import Host


def node(name: str, labels: dict[str, str], allocatable: dict[str, str], **annotations: str) -> Any:
    """A ``V1Node`` read from API JSON, the way the client builds it from a response."""
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", **allocatable}},
    }
    return from_api_json(body, "V1Node")


def discover(n: Any, **settings: Any) -> Host:
    host = host_from_node(n, KubernetesSettings(**settings))
    assert host is not None
    return host


GFD_A100 = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/gpu.count": "8",
}


def test_whole_gpus_come_from_allocatable_with_model_and_memory_from_feature_discovery_labels() -> None:
    host = discover(node("gpu-node-1", GFD_A100, {"nvidia.com/gpu": "8"}))

    assert host.name == "gpu-node-1"
    assert [gpu.uuid for gpu in host.gpus] == [f"gpu-node-1/gpu-{i}" for i in range(8)]
    assert {gpu.model for gpu in host.gpus} == {"NVIDIA-A100-SXM4-80GB"}
    assert {gpu.memory_mb for gpu in host.gpus} == {81920}
    assert host.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"


def test_time_sliced_replicas_are_not_counted_as_gpus() -> None:
    host = discover(node("shared", GFD_A100, {"nvidia.com/gpu": "32"}))

    assert len(host.gpus) == 8


def test_unhealthy_devices_missing_from_allocatable_are_not_offered() -> None:
    host = discover(node("degraded", GFD_A100, {"nvidia.com/gpu": "7"}))

    assert len(host.gpus) == 7


def test_mixed_strategy_mig_slices_hang_on_the_gpus_not_allocatable_whole() -> None:
    labels = GFD_A100 | {"nvidia.com/mig.strategy": "mixed"}
    allocatable = {"nvidia.com/gpu": "6", "nvidia.com/mig-3g.40gb": "4", "nvidia.com/mig-1g.10gb": "2"}
    host = discover(node("mig-node", labels, allocatable))

    whole = [gpu for gpu in host.gpus if not gpu.mig_enabled]
    parents = [gpu for gpu in host.gpus if gpu.mig_enabled]
    assert len(whole) == 6
    assert [gpu.index for gpu in parents] == [6, 7]
    profiles = sorted(instance.profile for gpu in parents for instance in gpu.mig_instances)
    assert profiles == ["1g.10gb"] * 2 + ["3g.40gb"] * 4
    assert all(len(gpu.mig_instances) == 3 for gpu in parents)


def test_single_strategy_reads_the_profile_from_the_product_label() -> None:
    labels = {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia.com/gpu.memory": "4864",
        "nvidia.com/gpu.count": "14",
    }
    host = discover(node("single-node", labels, {"nvidia.com/gpu": "14"}))

    (parent,) = host.gpus
    assert parent.mig_enabled
    assert parent.model == "A100-SXM4-40GB"
    assert parent.memory_mb == 40 * 1024
    assert [instance.profile for instance in parent.mig_instances] == ["1g.5gb"] * 14


def test_hamis_device_list_gives_real_uuids_and_overrides_its_inflated_allocatable_count() -> None:
    devices = [
        {"id": "GPU-aaa", "count": 10, "devmem": 32768, "devcore": 100, "type": "NVIDIA-Tesla V100-PCIE-32GB"},
        {
            "id": "GPU-bbb",
            "index": 1,
            "count": 10,
            "devmem": 32768,
            "devcore": 100,
            "type": "NVIDIA-Tesla V100-PCIE-32GB",
            "health": False,
        },
    ]
    n = node("hami-node", {}, {"nvidia.com/gpu": "20"}, **{"hami.io/node-nvidia-register": json.dumps(devices)})
    host = discover(n)

    (gpu,) = host.gpus
    assert (gpu.uuid, gpu.index, gpu.memory_mb, gpu.model) == ("GPU-aaa", 0, 32768, "NVIDIA-Tesla V100-PCIE-32GB")


def test_a_node_without_gpus_is_not_a_host() -> None:
    assert host_from_node(node("cpu-node", {}, {}), KubernetesSettings()) is None


def test_memory_falls_back_to_the_product_name_then_to_the_pool_setting_then_fails() -> None:
    from_name = discover(node("a", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": "1"}))
    assert from_name.gpus[0].memory_mb == 80 * 1024

    bare = node("b", {"nvidia.com/gpu.product": "NVIDIA-L4"}, {"nvidia.com/gpu": "1"})
    assert discover(bare, gpu_memory_mb=23034).gpus[0].memory_mb == 23034
    with pytest.raises(BackendError, match=r"node 'b': GPU memory unknown"):
        host_from_node(bare, KubernetesSettings())

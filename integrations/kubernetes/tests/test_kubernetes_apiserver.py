"""discover and stop through the real ``kubernetes`` client, over HTTP, against kmock's API emulator."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kmock
from kubernetes.client import ApiClient, Configuration, CoreV1Api, V1Container, V1ObjectMeta, V1Pod, V1PodSpec
from respools_kubernetes import KubernetesBackend, apply_to_pod
from respools_kubernetes.api_json import to_api_json

from respools.backends.registry import get_backend
from respools.model import Lease, PoolSpec

MakeLease = Callable[..., Lease]
MakePool = Callable[..., PoolSpec]

NODES = "v1/nodes"
PODS = "v1/pods"
JOBS = "batch/v1/jobs"


def gpu_node(name: str, gpus: int, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "respools.io/pool": pool,
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.memory": "81559",
                "nvidia.com/gpu.count": str(gpus),
            },
        },
        "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": str(gpus)}},
    }


def pod(name: str, lease_id: str, owner_job: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "ml", "labels": {"respools.io/lease-id": lease_id}}
    if owner_job is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner_job, "uid": "u-1", "controller": True}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [{"name": "main"}]}}


def live(apiserver: kmock.KubernetesEmulator, resource: str) -> set[str]:
    wanted = kmock.resource(resource)
    return {name for (kind, _, name), obj in apiserver.objects.items() if kind == wanted and not obj.deleted}


def test_discover_lists_the_pools_gpu_nodes_by_label_selector(
    apiserver: kmock.KubernetesEmulator, backend: KubernetesBackend, make_pool: MakePool
) -> None:
    apiserver.objects[NODES, None, "h100-b"] = gpu_node("h100-b", 4, pool="train")
    apiserver.objects[NODES, None, "h100-a"] = gpu_node("h100-a", 8, pool="train")
    apiserver.objects[NODES, None, "h100-other"] = gpu_node("h100-other", 8, pool="serve")
    apiserver.objects[NODES, None, "cpu-1"] = {
        "metadata": {"name": "cpu-1", "labels": {"respools.io/pool": "train"}},
        "status": {"allocatable": {"cpu": "32"}},
    }
    pool = make_pool(settings={"node_selector": {"respools.io/pool": "train"}})

    hosts = backend.discover(pool)

    assert [(host.name, len(host.gpus)) for host in hosts] == [("h100-a", 8), ("h100-b", 4)]
    assert {gpu.memory_mb for host in hosts for gpu in host.gpus} == {81559}
    (request,) = list(apiserver)
    assert request.params["labelSelector"] == "respools.io/pool=train"


def test_stop_deletes_the_leases_pods_and_the_job_that_would_recreate_them(
    apiserver: kmock.KubernetesEmulator, backend: KubernetesBackend, make_lease: MakeLease, make_pool: MakePool
) -> None:
    apiserver.objects[PODS, "ml", "step-bare"] = pod("step-bare", "lease-1")
    apiserver.objects[PODS, "ml", "step-job-x1"] = pod("step-job-x1", "lease-1", owner_job="step-job")
    apiserver.objects[JOBS, "ml", "step-job"] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "step-job", "namespace": "ml"},
    }
    apiserver.objects[PODS, "ml", "someone-else"] = pod("someone-else", "lease-2")
    pool = make_pool(settings={"namespace": "ml"})

    backend.stop(make_lease({"gpu": 1}), pool)

    assert live(apiserver, PODS) == {"someone-else"}
    assert live(apiserver, JOBS) == set()
    (listing, *_) = [request for request in apiserver if request.method == "GET"]
    assert listing.params["labelSelector"] == "respools.io/lease-id=lease-1"
    deletions = [request for request in apiserver if request.method == "DELETE"]
    assert {request.params["gracePeriodSeconds"] for request in deletions} == {"0"}

    backend.stop(make_lease({"gpu": 1}), pool)  # nothing left: a second stop is a no-op
    assert live(apiserver, PODS) == {"someone-else"}


def test_a_stop_is_confirmed_only_once_the_leases_pods_are_gone(
    apiserver: kmock.KubernetesEmulator, backend: KubernetesBackend, make_lease: MakeLease, make_pool: MakePool
) -> None:
    apiserver.objects[PODS, "ml", "step"] = pod("step", "lease-1")
    apiserver.objects[PODS, "ml", "someone-else"] = pod("someone-else", "lease-2")
    pool = make_pool(settings={"namespace": "ml"})
    lease = make_lease({"gpu": 1})

    assert backend.confirm_stopped(lease, pool) is None, "its pod is still there"
    backend.stop(lease, pool)
    evidence = backend.confirm_stopped(lease, pool)
    assert evidence is not None and "respools.io/lease-id=lease-1" in evidence and "ml" in evidence
    assert live(apiserver, PODS) == {"someone-else"}


def test_a_realized_pod_is_accepted_by_the_api_and_stopped_by_its_lease(
    apiserver: kmock.KubernetesEmulator, backend: KubernetesBackend, make_lease: MakeLease, make_pool: MakePool
) -> None:
    pool = make_pool(settings={"namespace": "ml", "fraction_mode": "hami"})
    lease = make_lease({"gpu": 0.5, "gpu_memory_mb": 40000}, id="lease-7")
    (fragment,) = backend.realize(lease, pool).native["pods"]
    step = V1Pod(
        metadata=V1ObjectMeta(name="train", namespace="ml"),
        spec=V1PodSpec(containers=[V1Container(name="main", image="python:3.11")]),
    )
    core = CoreV1Api(ApiClient(Configuration(host=str(apiserver.url).rstrip("/"))))

    created = core.create_namespaced_pod("ml", apply_to_pod(step, fragment))
    assert created.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"}
    (create,) = [request for request in apiserver if request.method == "POST"]
    assert create.data == to_api_json(apply_to_pod(step, fragment))

    backend.stop(lease, pool)
    assert live(apiserver, PODS) == set()


def test_the_default_client_follows_the_pools_kubeconfig_and_context(
    apiserver: kmock.KubernetesEmulator, make_pool: MakePool, tmp_path: Path
) -> None:
    apiserver.objects[NODES, None, "h100-a"] = gpu_node("h100-a", 8, pool="train")
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "mock", "cluster": {"server": str(apiserver.url).rstrip("/")}}],
        "users": [{"name": "mock", "user": {"token": "t"}}],
        "contexts": [{"name": "ci", "context": {"cluster": "mock", "user": "mock"}}],
        "current-context": "elsewhere",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(kubeconfig))

    hosts = KubernetesBackend().discover(make_pool(settings={"kubeconfig": str(path), "context": "ci"}))

    assert [host.name for host in hosts] == ["h100-a"]
    (request,) = list(apiserver)
    assert request.headers["Authorization"] == "Bearer t"


def test_the_entry_point_names_this_backend() -> None:
    assert isinstance(get_backend("kubernetes"), KubernetesBackend)

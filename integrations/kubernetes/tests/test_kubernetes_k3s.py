"""The backend and the controller against a real API server: K3s in a container (testcontainers), where
Docker runs (skipped with the reason where it does not).

The node gets two GPUs the way a device plugin and feature discovery would advertise them (extended
resource capacity on the node status, product and memory labels), so discover, realize and stop run their
whole path: the API server itself admits the realized pod with strict field validation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
import yaml
from docker.errors import DockerException
from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api, V1Container, V1ObjectMeta, V1Pod, V1PodSpec
from kubernetes.client.exceptions import ApiException
from kubernetes.config import new_client_from_config_dict
from respools_kubernetes import KubernetesBackend, apply_to_pod
from respools_kubernetes.controller import Controller, ControllerSettings
from respools_kubernetes.settings import KubernetesSettings

from respools import Client
from respools.model import Lease, PoolSpec
from respools.server.process import ServerProcess

K3S_IMAGE = "rancher/k3s:v1.31.4-k3s1"
WAIT_S = 90.0


def _docker_missing() -> str | None:
    try:
        docker.from_env().ping()
    except DockerException as exc:
        return f"no Docker engine reachable ({exc.__class__.__name__}); the K3s test runs K3s in a container"
    return None


DOCKER_MISSING = _docker_missing()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(DOCKER_MISSING is not None, reason=DOCKER_MISSING or "")]


@pytest.fixture(scope="module")
def kubeconfig() -> Iterator[dict[str, object]]:
    from testcontainers.community.k3s import K3SContainer

    with K3SContainer(image=K3S_IMAGE) as k3s:
        yield yaml.safe_load(k3s.config_yaml())


def _client(kubeconfig: dict[str, object]) -> Callable[[KubernetesSettings], ApiClient]:
    def api_client(settings: KubernetesSettings) -> ApiClient:
        client: ApiClient = new_client_from_config_dict(kubeconfig, persist_config=False)
        return client

    return api_client


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(1)


def test_discover_realize_and_stop_against_k3s(
    kubeconfig: dict[str, object], make_lease: Callable[..., Lease], make_pool: Callable[..., PoolSpec]
) -> None:
    api_client = _client(kubeconfig)
    core = CoreV1Api(api_client(KubernetesSettings()))
    node = core.list_node().items[0].metadata.name
    core.patch_node_status(node, {"status": {"capacity": {"nvidia.com/gpu": "2"}}})
    labels = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.memory": "23034", "nvidia.com/gpu.count": "2"}
    core.patch_node(node, {"metadata": {"labels": labels}})
    _until(
        lambda: (core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu") == "2",
        "the node to advertise its GPUs",
    )
    backend = KubernetesBackend(api_client_factory=api_client)

    (host,) = backend.discover(make_pool())
    assert (host.name, len(host.gpus), host.gpus[0].memory_mb) == (node, 2, 23034)

    pool = make_pool(inventory=[host.model_dump()])
    gpu = host.gpus[1]
    lease = make_lease({"gpu": 1}, items=[{"host": node, "gpu_uuid": gpu.uuid, "gpu_index": gpu.index}])
    (fragment,) = backend.realize(lease, pool).native["pods"]
    step = V1Pod(
        metadata=V1ObjectMeta(name="respools-step"),
        spec=V1PodSpec(containers=[V1Container(name="main", image="registry.k8s.io/pause:3.10")]),
    )
    created = core.create_namespaced_pod("default", apply_to_pod(step, fragment), field_validation="Strict")
    assert created.spec.node_selector == {"kubernetes.io/hostname": node}

    backend.stop(lease, pool)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("respools-step", "default")
        except ApiException as exc:
            return bool(exc.status == 404)
        return False

    _until(gone, "the lease's pod to be deleted")


def test_the_controller_admits_preempts_and_requeues_a_job_on_k3s(
    kubeconfig: dict[str, object], tmp_path: Path
) -> None:
    """The whole controller path on a real API server and Job controller: the node becomes the pool's
    inventory, a labelled Job is held, admitted onto the node and runs, is preempted (suspended, its pod
    deleted with grace), requeued and admitted again."""
    api = new_client_from_config_dict(kubeconfig, persist_config=False)
    core, batch = CoreV1Api(api), BatchV1Api(api)
    node = core.list_node().items[0].metadata.name
    pool = "k3s-gpus"
    core.patch_node_status(node, {"status": {"capacity": {"nvidia.com/gpu": "2"}}})
    labels = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.memory": "23034", "respools.io/pool": pool}
    core.patch_node(node, {"metadata": {"labels": labels}})
    _until(lambda: (core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu") == "2", "the node's GPUs")

    token = "rpt_admin_" + "3" * 32
    server = ServerProcess(f"sqlite:///{tmp_path}/respools.db", token, tmp_path / "server.log").start()
    admin = Client(server.url, token)
    settings = ControllerSettings(namespace="default", identity="k3s", resync_s=0.5, watch_timeout_s=30)
    controller = Controller(api, Client(server.url, token), settings)
    try:
        admin.put(
            f"/v1/pools/{pool}",
            {"name": pool, "stack": "kubernetes", "settings": {"node_selector": {"respools.io/pool": pool}}},
        )
        admin.put("/v1/subjects/research", {"name": "research"})
        admin.post("/v1/policies", {"subject": "research", "pool": pool, "priority": 10})
        controller.start()
        _until(lambda: bool(admin.get(f"/v1/pools/{pool}/hosts")), "the node to join the pool")

        container = {
            "name": "main",
            "image": "registry.k8s.io/pause:3.10",
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        }
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", "labels": {"respools.io/pool": pool, "respools.io/subject": "research"}},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
        }
        batch.create_namespaced_job("default", job)

        def annotations() -> dict[str, str]:
            found: dict[str, str] = batch.read_namespaced_job("train", "default").metadata.annotations or {}
            return found

        _until(lambda: annotations().get("respools.io/state") == "admitted", "the Job to be admitted")
        first_lease = annotations()["respools.io/lease-id"]

        def lease_pods(lease_id: str) -> list[V1Pod]:
            pods: list[V1Pod] = core.list_namespaced_pod(
                "default", label_selector=f"respools.io/lease-id={lease_id}"
            ).items
            return pods

        _until(lambda: any(p.spec.node_name == node for p in lease_pods(first_lease)), "the Job's pod on the node")

        admin.preempt_lease(first_lease, grace_s=10)
        _until(lambda: annotations().get("respools.io/state") in ("preempting", "requeued", "admitted"), "the notice")
        _until(lambda: not lease_pods(first_lease), "the preempted pod to be gone")
        _until(
            lambda: (
                annotations().get("respools.io/state") == "admitted"
                and annotations().get("respools.io/lease-id") != first_lease
            ),
            "the Job to be admitted again",
        )
        assert annotations()["respools.io/attempt"] == "1"
    finally:
        controller.stop()
        admin.close()
        server.stop()

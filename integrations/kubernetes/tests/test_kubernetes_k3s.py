"""The backend against a real API server: K3s in a container (testcontainers), where Docker runs.

The node gets two GPUs the way a device plugin and feature discovery would advertise them (extended
resource capacity on the node status, product and memory labels), so discover, realize and stop run their
whole path: the API server itself admits the realized pod with strict field validation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import docker
import pytest
import yaml
from docker.errors import DockerException
from kubernetes.client import ApiClient, CoreV1Api, V1Container, V1ObjectMeta, V1Pod, V1PodSpec
from kubernetes.client.exceptions import ApiException
from kubernetes.config import new_client_from_config_dict
from respools_kubernetes import KubernetesBackend, apply_to_pod
from respools_kubernetes.settings import KubernetesSettings

from respools.model import Lease, PoolSpec

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

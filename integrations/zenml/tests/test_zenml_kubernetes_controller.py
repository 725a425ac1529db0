"""The pooled Kubernetes orchestrator with ``admission="controller"``: a ZenML step's Job is labelled for
the respools Kubernetes controller, which holds it, admits it on the granted node, and after a preemption
suspends it, requeues its request and admits it again — a preempted ZenML step on Kubernetes is retried as
on the local stack.

The parts are real: the step's Job is the one ZenML's own manifest builders make from the settings the
orchestrator hands back; the controller (``respools_kubernetes.controller``) talks to kmock's Kubernetes
emulator through the official client over HTTP (lists and watches), and to a real respools server."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import kmock
import pytest
import respools_zenml
from kmock_thread import serve_in_thread
from kubernetes.client import ApiClient, Configuration
from respools_kubernetes.controller import Controller, ControllerSettings, names
from respools_server import ADMIN_TOKEN, RespoolsServer
from respools_zenml.demand import StepDemand
from respools_zenml.kubernetes.controller_labels import labelled_pod_settings, pod_resources
from respools_zenml.kubernetes.orchestrator import ORCHESTRATOR_POD_ENV, PooledKubernetesOrchestratorSettings
from respools_zenml.leasing import LEASE_ENV
from test_zenml_kubernetes import compiled, orchestrator, step_job
from zenml.config import ResourceSettings
from zenml.integrations.kubernetes.pod_settings import KubernetesPodSettings

import respools

JOBS, NODES = "batch/v1/jobs", "v1/nodes"


@pytest.fixture
def cluster() -> Iterator[kmock.KubernetesEmulator]:
    """kmock's Kubernetes emulator on a loopback port, serving Nodes, Pods, Jobs, Events and Leases."""

    def configure(handler: kmock.KubernetesEmulator) -> None:
        for resource in ("v1/nodes", "v1/pods", JOBS, "coordination.k8s.io/v1/leases", "v1/events"):
            handler.resources[resource] = kmock.ResourceInfo()

    yield from serve_in_thread(kmock.KubernetesEmulator, configure)


def eventually(check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (KeyError, AssertionError, TypeError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(0.1)
    raise AssertionError(f"not reached within {timeout} s; last: {last!r}")


def gpu_node(name: str, pool: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"respools.io/pool": pool, "kubernetes.io/hostname": name, "nvidia.com/gpu.memory": "81920"},
        },
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def job_notes(cluster: kmock.KubernetesEmulator, name: str) -> dict[str, str]:
    found = cluster.objects[JOBS, "ml", name]
    value: dict[str, str] = found.raw["metadata"].get("annotations") or {}
    return value


def test_the_step_demand_becomes_what_the_controller_reads_from_a_pod() -> None:
    assert pod_resources({"gpu": 2, "mcpu": 4000, "memory_mb": 8192}) == (
        {"nvidia.com/gpu": "2"},
        {"cpu": "4000m", "memory": "8192Mi"},
        {},
    )
    assert pod_resources({"mig.3g.40gb": 1}) == ({"nvidia.com/mig-3g.40gb": "1"}, {}, {})
    assert pod_resources({"gpu": 0.25, "gpu_memory_mb": 20000})[2] == {
        "respools.io/gpu-fraction": "0.25",
        "respools.io/gpu-memory-mb": "20000",
    }
    user = KubernetesPodSettings(
        resources={"limits": {"nvidia.com/gpu": "1"}}, annotations={"respools.io/priority": "9"}
    )
    demand = StepDemand(resources={"gpu": 2}, pools=["h100"], preemptible=True, max_retries=2)
    labelled = labelled_pod_settings(demand, user, subject="vision")
    assert labelled.resources["limits"] == {"nvidia.com/gpu": "1"}  # the user's pod settings win
    assert labelled.annotations == {
        "respools.io/pool": "h100",
        "respools.io/subject": "vision",
        "respools.io/preemptible": "true",
        "respools.io/priority": "9",
        "respools.io/max-retries": "2",
    }


@pytest.mark.slow
def test_a_preempted_zenml_step_job_is_requeued_and_admitted_again_by_the_controller(
    respools_server: RespoolsServer, cluster: kmock.KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ORCHESTRATOR_POD_ENV, "train_pipeline")  # this process plays the orchestrator pod
    monkeypatch.setenv("ZENML_KUBERNETES_RUN_ID", f"orchestrator-{uuid.uuid4().hex[:8]}")
    monkeypatch.delenv(LEASE_ENV, raising=False)
    pool = f"k8s-{uuid.uuid4().hex[:8]}"
    respools_server.ok(
        "PUT",
        f"/v1/pools/{pool}",
        json={
            "name": pool,
            "stack": "kubernetes",
            "settings": {"node_selector": {"respools.io/pool": pool}},
            "preemption_grace_s": 5,
        },
    )
    subject = f"vision-{uuid.uuid4().hex[:8]}"
    respools_server.ok("PUT", f"/v1/subjects/{subject}", json={"name": subject})
    respools_server.ok("POST", "/v1/policies", json={"subject": subject, "pool": pool, "priority": 10})
    token = respools_server.ok("POST", "/v1/tokens", json={"role": "subject", "subject": subject})["token"]

    @respools_zenml.step(resources=ResourceSettings(gpu_count=2), preemptible=True)
    def train() -> None: ...

    pooled = orchestrator(respools_server.url, token, pool=pool, admission="controller")
    started = time.monotonic()
    settings = pooled.get_settings(compiled(train))
    assert time.monotonic() - started < 5  # nothing waits in the orchestrator pod
    assert isinstance(settings, PooledKubernetesOrchestratorSettings) and settings.pod_settings is not None
    assert settings.pod_failure_policy is None  # no FailJob: the controller suspends, ZenML counts no failure
    job = step_job(settings.pod_settings)
    job["metadata"].update(namespace="ml", uid="uid-zenml-train")
    assert job["spec"]["template"]["metadata"]["annotations"][names.POOL] == pool

    cluster.objects[NODES, None, "gpu-a"] = gpu_node("gpu-a", pool, 2)
    cluster.objects[JOBS, "ml", "train-job"] = job
    admin = respools.Client(respools_server.url, ADMIN_TOKEN)
    controller = Controller(
        ApiClient(Configuration(host=str(cluster.url).rstrip("/"))),
        respools.Client(respools_server.url, ADMIN_TOKEN),
        ControllerSettings(identity="zenml-test", resync_s=0.2, watch_timeout_s=2, lease_duration_s=2.0),
    ).start()
    try:
        admitted = eventually(lambda: job_notes(cluster, "train-job").get(names.STATE) == "admitted")
        assert admitted
        first = job_notes(cluster, "train-job")[names.LEASE_ID]
        lease = admin.get_lease(first)
        assert lease.subject == subject and lease.pool == pool and lease.resources["gpu"] == 2000
        assert cluster.objects[JOBS, "ml", "train-job"].raw["spec"]["suspend"] is False

        admitted_at = len(list(cluster))
        admin.preempt_lease(first, message="a higher-priority team", grace_s=5)

        def admitted_again() -> bool:
            notes = job_notes(cluster, "train-job")
            return notes.get(names.STATE) == "admitted" and notes.get(names.LEASE_ID) != first

        eventually(admitted_again)
        # On the way the Job was suspended (not failed: ZenML waits on it) and marked for the requeue. The
        # controller can pass both between two looks of this test, so its writes to the Job say it.
        writes = [r.data for r in list(cluster)[admitted_at:] if r.method == "PATCH" and r.name == "train-job"]
        assert any((w.get("spec") or {}).get("suspend") is True for w in writes), writes
        states = [((w.get("metadata") or {}).get("annotations") or {}).get(names.STATE) for w in writes]
        assert {"preempting", "requeued"} & set(states), states
        notes = job_notes(cluster, "train-job")
        assert notes[names.ATTEMPT] == "1"
        assert admin.get_lease(notes[names.LEASE_ID]).attempt == 1
        assert cluster.objects[JOBS, "ml", "train-job"].raw["spec"]["suspend"] is False
    finally:
        controller.stop()
        admin.close()

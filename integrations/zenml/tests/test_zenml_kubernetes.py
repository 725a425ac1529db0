"""The pooled Kubernetes orchestrator's pod settings, checked against the Kubernetes client models and API
schemas (no cluster here: the orchestrator is not run, the settings it would hand ZenML are).

Pods and Jobs are built the way ZenML's orchestrator pod builds a step's (``build_pod_manifest`` and
``build_job_manifest`` from the step's settings), then validated with ``kubernetes-validate`` (strict) and
read back into the client's models.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import kubernetes_validate
import pytest
import respools_zenml
from kubernetes.client import ApiClient
from respools_kubernetes.api_json import from_api_json
from respools_server import RespoolsServer
from respools_zenml.kubernetes.orchestrator import (
    FAIL_JOB_ON_ERROR,
    ORCHESTRATOR_POD_ENV,
    RUN_ENV,
    PooledKubernetesOrchestrator,
    PooledKubernetesOrchestratorConfig,
    PooledKubernetesOrchestratorSettings,
)
from respools_zenml.kubernetes.pod_settings import PodSettingsError, realize_pod_settings
from respools_zenml.leasing import LEASE_ENV, LeaseArgs
from zenml.config import ResourceSettings
from zenml.config.step_configurations import Step, StepConfiguration, StepSpec
from zenml.enums import StackComponentType
from zenml.integrations.kubernetes import kube_utils
from zenml.integrations.kubernetes.manifest_utils import (
    build_job_manifest,
    build_pod_manifest,
    pod_template_manifest_from_pod,
)
from zenml.integrations.kubernetes.pod_settings import KubernetesPodSettings
from zenml.steps import BaseStep

import respools
from respools.backends.protocol import BackendError
from respools.model import Lease, PoolSpec

SCHEMA_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
A100 = "NVIDIA A100-SXM4-80GB"
INVENTORY: list[dict[str, Any]] = [
    {
        "name": "gpu-node-1",
        "labels": {"kubernetes.io/hostname": "gpu-node-1.cluster.internal"},
        "gpus": [
            {"uuid": "GPU-0001", "index": 0, "model": A100, "memory_mb": 81920},
            {"uuid": "GPU-0002", "index": 1, "model": A100, "memory_mb": 81920},
            {
                "uuid": "GPU-0003",
                "index": 2,
                "model": A100,
                "memory_mb": 81920,
                "mig_enabled": True,
                "mig_instances": [{"uuid": "MIG-0003-a", "profile": "3g.40gb"}],
            },
        ],
    }
]
THREE_GPUS = [
    {
        "name": "gpu-node-1",
        "gpus": [{"uuid": f"GPU-100{i}", "index": i, "model": A100, "memory_mb": 81920} for i in range(3)],
    }
]
USER_POD_SETTINGS = KubernetesPodSettings(
    node_selectors={"cloud.google.com/gke-nodepool": "gpu"},
    tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
    resources={"requests": {"memory": "8Gi"}},
    labels={"team": "vision"},
    env=[{"name": "WANDB_MODE", "value": "offline"}],
)


def pool(**fields: Any) -> PoolSpec:
    return PoolSpec.model_validate({"name": "k8s", "stack": "kubernetes", "inventory": INVENTORY} | fields)


def lease(resources: dict[str, float], items: list[dict[str, Any]], **fields: Any) -> Lease:
    now = datetime.now(UTC)
    return Lease.model_validate(
        {
            "id": "lse-1",
            "request_id": "req-1",
            "subject": "vision",
            "pool": "k8s",
            "stack": "kubernetes",
            "resources": resources,
            "placement": {"items": items},
            "state": "granted",
            "preemptible": True,
            "granted_at": now,
            "expires_at": now + timedelta(minutes=1),
        }
        | fields
    )


def step_job(settings: KubernetesPodSettings, pod_failure_policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Job ZenML's orchestrator pod would create for a step with ``settings``, validated and as JSON."""
    pod_settings = kube_utils.apply_default_resource_requests(memory="400Mi", pod_settings=settings)
    pod = build_pod_manifest(
        pod_name=None,
        image_name="registry.example.com/train:1",
        command=["python", "-m", "zenml.entrypoints.entrypoint"],
        args=["--step_name", "train"],
        privileged=False,
        pod_settings=pod_settings,
        env={"ZENML_STORE_URL": "https://zenml.example.com"},
        labels={"run_id": "r1", "step_name": "train"},
    )
    job = build_job_manifest(
        job_name="train-job",
        pod_template=pod_template_manifest_from_pod(pod),
        backoff_limit=2,
        ttl_seconds_after_finished=None,
        active_deadline_seconds=None,
        pod_failure_policy=pod_failure_policy,
        labels={"run_id": "r1"},
    )
    body: dict[str, Any] = ApiClient().sanitize_for_serialization(job)
    body = {"apiVersion": "batch/v1", "kind": "Job", **body}  # the endpoint implies them; the schema wants them
    for version in SCHEMA_VERSIONS:
        kubernetes_validate.validate(body, version, strict=True)
    assert from_api_json(body, "V1Job").spec.template.spec.containers[0].name == "main"
    return body


def container(job: dict[str, Any]) -> dict[str, Any]:
    main: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return main


def env_of(job: dict[str, Any]) -> dict[str, str]:
    return {var["name"]: var.get("value", "") for var in container(job).get("env", [])}


def test_whole_gpus_pinned_to_the_placed_node_keep_the_users_pod_settings() -> None:
    placed = lease(
        {"gpu": 2, "mcpu": 4000, "memory_mb": 16384},
        [
            {"host": "gpu-node-1", "gpu_uuid": "GPU-0001", "gpu_index": 0},
            {"host": "gpu-node-1", "gpu_uuid": "GPU-0002", "gpu_index": 1},
        ],
    )
    settings = realize_pod_settings(placed, pool(), USER_POD_SETTINGS, env={"EXTRA": "1"})
    job = step_job(settings)
    spec = job["spec"]["template"]["spec"]
    resources = container(job)["resources"]
    assert resources["limits"] == {"nvidia.com/gpu": "2"}
    assert resources["requests"] == {"memory": "8Gi", "cpu": "4000m"}  # the user's memory wins, CPU from the lease
    assert spec["nodeSelector"] == {
        "cloud.google.com/gke-nodepool": "gpu",
        "kubernetes.io/hostname": "gpu-node-1.cluster.internal",
    }
    tolerations = {(t["key"], t["effect"]) for t in spec["tolerations"]}
    assert tolerations == {("dedicated", "NoSchedule"), ("nvidia.com/gpu", "NoSchedule")}
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["respools.io/lease-id"] == "lse-1" and labels["team"] == "vision"
    assert env_of(job) | {"WANDB_MODE": "offline", "RESPOOLS_LEASE_ID": "lse-1", "EXTRA": "1"} == env_of(job)


def test_memory_request_comes_from_the_lease_when_the_user_gives_none() -> None:
    placed = lease({"gpu": 1, "memory_mb": 2048}, [{"host": "gpu-node-1", "gpu_uuid": "GPU-0001", "gpu_index": 0}])
    job = step_job(realize_pod_settings(placed, pool(), None))
    assert container(job)["resources"]["requests"] == {"memory": "2048M"}


def test_mig_slice_under_the_mixed_strategy() -> None:
    placed = lease(
        {"mig.3g.40gb": 1},
        [
            {
                "host": "gpu-node-1",
                "gpu_uuid": "GPU-0003",
                "gpu_index": 2,
                "mig_uuid": "MIG-0003-a",
                "mig_profile": "3g.40gb",
            }
        ],
    )
    job = step_job(realize_pod_settings(placed, pool(), USER_POD_SETTINGS))
    assert container(job)["resources"]["limits"] == {"nvidia.com/mig-3g.40gb": "1"}


def test_hami_fraction_with_memory_cap_and_gpu_pinning() -> None:
    placed = lease(
        {"gpu": 0.25},
        [{"host": "gpu-node-1", "gpu_uuid": "GPU-0001", "gpu_index": 0, "milli": 250, "memory_mb": 20480}],
    )
    job = step_job(realize_pod_settings(placed, pool(settings={"fraction_mode": "hami"}), USER_POD_SETTINGS))
    assert container(job)["resources"]["limits"] == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480"}
    assert job["spec"]["template"]["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] == "GPU-0001"


def test_lease_without_placement_asks_for_the_count_only() -> None:
    unplaced = lease({"gpu": 1}, [])
    job = step_job(realize_pod_settings(unplaced, pool(inventory=None, capacity={"gpu": 4}), None))
    assert container(job)["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "nodeSelector" not in job["spec"]["template"]["spec"]


def test_a_node_selector_that_contradicts_the_placement_is_refused() -> None:
    placed = lease({"gpu": 1}, [{"host": "gpu-node-1", "gpu_uuid": "GPU-0001", "gpu_index": 0}])
    elsewhere = KubernetesPodSettings(node_selectors={"kubernetes.io/hostname": "cpu-node-9"})
    with pytest.raises(BackendError, match="no node satisfies both"):
        realize_pod_settings(placed, pool(), elsewhere)


def test_a_pool_of_another_stack_is_refused() -> None:
    local_lease = lease({"gpu": 1}, [], stack="local")
    with pytest.raises(PodSettingsError, match="stack 'kubernetes'"):
        realize_pod_settings(local_lease, PoolSpec(name="k8s", stack="local", capacity={"gpu": 1}), None)


def test_pooled_job_fails_instead_of_retrying_with_a_stale_lease() -> None:
    job = step_job(KubernetesPodSettings(), FAIL_JOB_ON_ERROR)
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJob" and rules[0]["onExitCodes"]["containerName"] == "main"


# -- the orchestrator pod, against a real respools server ----------------------------------------------


@pytest.fixture
def orchestrator_pod(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This process plays ZenML's orchestrator pod: the marker and the placeholder run's id that the
    flavor's ``submit_pipeline`` puts in its environment (a run this test's store does not know: the cache
    check finds nothing and the step queues)."""
    run_id = str(uuid.uuid4())
    monkeypatch.setenv(ORCHESTRATOR_POD_ENV, "train_pipeline")
    monkeypatch.setenv(RUN_ENV, run_id)
    monkeypatch.delenv(LEASE_ENV, raising=False)
    yield run_id


def orchestrator(url: str, token: str, **config: Any) -> PooledKubernetesOrchestrator:
    now = datetime.now(UTC)
    return PooledKubernetesOrchestrator(
        name="pooled-k8s",
        id=uuid.uuid4(),
        config=PooledKubernetesOrchestratorConfig(
            respools_url=url, respools_token=token, kubernetes_context="unused", **config
        ),
        flavor="respools_kubernetes",
        type=StackComponentType.ORCHESTRATOR,
        user=None,
        created=now,
        updated=now,
    )


def compiled(step_instance: BaseStep) -> Step:
    """The step as the compiler puts it into a snapshot (what ZenML hands the orchestrator)."""
    configuration = StepConfiguration.model_validate(
        {
            **step_instance.configuration.model_dump(),
            "name": step_instance.name,
            "caching_parameters": {},
            "external_input_artifacts": {},
        }
    )
    spec = StepSpec(source="steps.train", upstream_steps=[], invocation_id=step_instance.name)
    return Step(spec=spec, config=configuration, step_config_overrides=configuration)


@pytest.mark.slow
def test_orchestrator_pod_creates_the_step_pod_only_once_granted(
    respools_server: RespoolsServer, orchestrator_pod: str
) -> None:
    capacity_pool = f"k8s-{uuid.uuid4().hex[:8]}"
    respools_server.ok(
        "PUT",
        f"/v1/pools/{capacity_pool}",
        json={"name": capacity_pool, "stack": "kubernetes", "inventory": THREE_GPUS},
    )
    subject = f"vision-{uuid.uuid4().hex[:8]}"
    respools_server.ok("PUT", f"/v1/subjects/{subject}", json={"name": subject})
    respools_server.ok("POST", "/v1/policies", json={"subject": subject, "pool": capacity_pool, "reserved": {"gpu": 3}})
    token = respools_server.ok("POST", "/v1/tokens", json={"role": "subject", "subject": subject})["token"]

    @respools_zenml.step(resources=ResourceSettings(gpu_count=2, cpu_count=2), preemptible=False)
    def train() -> None: ...

    step = compiled(train)
    pooled = orchestrator(respools_server.url, token, pool=capacity_pool, pod_settings=USER_POD_SETTINGS)
    client = respools.Client(respools_server.url, token)
    busy = respools.lease(gpu=2, pool=capacity_pool, client=client, progress=False)
    busy.__enter__()  # two of the three GPUs are taken: the step's two must wait
    answers: list[Any] = []

    def ask() -> None:  # ZenML's step start-up thread; a second one asks at the same time
        answers.append(pooled.get_settings(step))

    threads = [threading.Thread(target=ask, daemon=True) for _ in range(2)]
    try:
        for thread in threads:
            thread.start()
        queued = wait_for(lambda: [r for r in client.list_requests(subject=subject) if r.labels.get("step") == "train"])
        assert [r.state.value for r in queued] == ["pending"] and queued[0].labels["zenml_run_id"] == orchestrator_pod
        assert all(thread.is_alive() for thread in threads) and not answers  # no settings, so no pod, yet
    finally:
        busy.__exit__(None, None, None)
    for thread in threads:
        thread.join(60)
    settings = answers[0]
    assert isinstance(settings, PooledKubernetesOrchestratorSettings)
    assert settings.pod_failure_policy == FAIL_JOB_ON_ERROR

    assert settings.pod_settings is not None
    job = step_job(settings.pod_settings, settings.pod_failure_policy)
    assert container(job)["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert container(job)["resources"]["requests"]["cpu"] == "2000m"
    pod_env = env_of(job)
    args = LeaseArgs.model_validate_json(pod_env[LEASE_ENV])  # how the step's pod finds its lease
    assert args.step_name == "train" and args.max_retries == 0 and args.preemptible is False
    granted = client.get_lease(pod_env["RESPOOLS_LEASE_ID"])
    assert granted.state.value == "granted" and granted.pool == capacity_pool
    assert job["spec"]["template"]["metadata"]["labels"]["respools.io/lease-id"] == granted.id

    # Asked again, at once or later (ZenML asks while it monitors the Job): same settings, one request.
    assert answers[1] is settings and pooled.get_settings(step) is settings
    requests = client.list_requests(subject=subject)
    assert len([r for r in requests if r.labels.get("step") == "train"]) == 1
    client.release(granted.id)
    client.close()


def wait_for(condition: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.1)
    raise AssertionError(f"not reached within {timeout} s")


def test_outside_the_orchestrator_pod_settings_are_plain(respools_server: RespoolsServer) -> None:
    assert ORCHESTRATOR_POD_ENV not in os.environ

    @respools_zenml.step(gpu=1)
    def train() -> None: ...

    pooled = orchestrator(respools_server.url, "unused-token")
    settings = pooled.get_settings(compiled(train))
    assert isinstance(settings, PooledKubernetesOrchestratorSettings)
    assert settings.pod_settings is None and settings.pod_failure_policy is None

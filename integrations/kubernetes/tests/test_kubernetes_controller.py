"""The controller end to end: the official ``kubernetes`` client over HTTP against kmock's API emulator
(lists and watches), and a real respools service in a subprocess. The tests play the cluster's own
controllers where a workload needs them (the Job controller's pods, a kubelet's finalizer)."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest
from kubernetes.client import ApiClient, BatchV1Api, Configuration, CoreV1Api
from respools_kubernetes.controller import Controller, ControllerSettings, names

from respools import Client
from respools.model import RequestSpec, RequestState
from respools.server.process import ServerProcess

ADMIN_TOKEN = "rpt_admin_" + "k" * 32
NODES, PODS, JOBS = "v1/nodes", "v1/pods", "batch/v1/jobs"
MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with tempfile.TemporaryDirectory(prefix="respools-k8s-") as tmp:
        process = ServerProcess(f"sqlite:///{tmp}/respools.db", ADMIN_TOKEN, Path(tmp) / "server.log")
        process.start()
        try:
            yield process
        finally:
            process.stop()


@pytest.fixture
def admin(server: ServerProcess) -> Iterator[Client]:
    with Client(server.url, ADMIN_TOKEN) as client:
        yield client


@pytest.fixture
def pool(admin: Client) -> str:
    """A fresh kubernetes pool whose nodes carry ``respools.io/pool=<name>``, and subject ``team-<name>``
    borrowing the whole pool (the controller asks for preemptible leases)."""
    name = f"k8s-{uuid.uuid4().hex[:8]}"
    settings = {"node_selector": {"respools.io/pool": name}}
    admin.put(
        f"/v1/pools/{name}", {"name": name, "stack": "kubernetes", "settings": settings, "preemption_grace_s": 30}
    )
    admin.put(f"/v1/subjects/team-{name}", {"name": f"team-{name}"})
    admin.post("/v1/policies", {"subject": f"team-{name}", "pool": name, "priority": 10})
    return name


@pytest.fixture
def core(watched_apiserver: kmock.KubernetesEmulator) -> CoreV1Api:
    return CoreV1Api(ApiClient(Configuration(host=str(watched_apiserver.url).rstrip("/"))))


@pytest.fixture
def batch(watched_apiserver: kmock.KubernetesEmulator) -> BatchV1Api:
    return BatchV1Api(ApiClient(Configuration(host=str(watched_apiserver.url).rstrip("/"))))


ControllerFactory = Callable[..., Controller]


@pytest.fixture
def controller(watched_apiserver: kmock.KubernetesEmulator, server: ServerProcess) -> Iterator[ControllerFactory]:
    started: list[Controller] = []

    def start(identity: str = "replica-a") -> Controller:
        settings = ControllerSettings(
            identity=identity, resync_s=0.2, watch_timeout_s=2, lease_duration_s=2.0, host_ttl_s=60
        )
        api = ApiClient(Configuration(host=str(watched_apiserver.url).rstrip("/")))
        made = Controller(api, Client(server.url, ADMIN_TOKEN), settings).start()
        started.append(made)
        return made

    yield start
    for made in started:
        made.stop()


def eventually(check: Callable[[], Any], timeout: float = 15.0) -> Any:
    """Poll ``check`` until it returns something truthy; its last answer in the failure message."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (KeyError, AssertionError, TypeError) as exc:
            last = exc  # not there yet (an object still missing): look again
        else:
            if last:
                return last
        time.sleep(0.1)
    raise AssertionError(f"not reached within {timeout} s; last: {last!r}")


def node(name: str, pool: str, gpus: int, **spec: Any) -> dict[str, Any]:
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
            },
        },
        "spec": spec,
        "status": {
            "allocatable": {"cpu": "96", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def container(resources: dict[str, str]) -> dict[str, Any]:
    return {"name": "main", "image": "python:3.11", "resources": {"limits": resources}}


def workload_labels(pool: str) -> dict[str, str]:
    return {"respools.io/pool": pool, "respools.io/subject": f"team-{pool}"}


def job(name: str, uid: str, resources: dict[str, str], *, pool: str, **spec: Any) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {"restartPolicy": "Never", "containers": [container(resources)]},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "uid": uid, "labels": workload_labels(pool)},
        "spec": {"template": template, **spec},
    }


def gated_pod(name: str, uid: str, resources: dict[str, str], *, pool: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": uid,
            "annotations": annotations,
            "labels": workload_labels(pool),
        },
        "spec": {"schedulingGates": [{"name": "respools.io/admission"}], "containers": [container(resources)]},
    }


def obj(
    watched_apiserver: kmock.KubernetesEmulator, resource: str, name: str, namespace: str | None = "ml"
) -> dict[str, Any]:
    found = watched_apiserver.objects[resource, namespace, name]
    assert not found.deleted
    raw: dict[str, Any] = found.raw
    return raw


def wait_for_hosts(admin: Client, pool: str) -> None:
    eventually(lambda: admin.get(f"/v1/pools/{pool}/hosts"))


def in_state(server: kmock.KubernetesEmulator, resource: str, name: str, state: str) -> dict[str, Any] | None:
    found = obj(server, resource, name)
    return found if notes(found).get(names.STATE) == state else None


def notes(raw: dict[str, Any]) -> dict[str, str]:
    value: dict[str, str] = raw["metadata"].get("annotations") or {}
    return value


def hostname_values(template_spec: dict[str, Any]) -> list[str]:
    terms = template_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    return [
        v for t in terms for e in t["matchExpressions"] if e["key"] == "kubernetes.io/hostname" for v in e["values"]
    ]


def requests_of(admin: Client, uid: str) -> list[Any]:
    return admin.list_requests(label=f"{names.WORKLOAD_UID}={uid}")


def event_reasons(watched_apiserver: kmock.KubernetesEmulator, name: str) -> list[str]:
    wanted = kmock.resource("v1/events")
    return [
        o.raw["reason"]
        for (kind, _, _), o in watched_apiserver.objects.items()
        if kind == wanted and o.raw["involvedObject"]["name"] == name
    ]


def job_pod(watched_apiserver: kmock.KubernetesEmulator, job_raw: dict[str, Any], index: int) -> str:
    """What the Job controller does once a Job runs: a pod from its template, owned by the Job."""
    template = job_raw["spec"]["template"]
    name = f"{job_raw['metadata']['name']}-{index}"
    watched_apiserver.objects[PODS, "ml", name] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template["metadata"],
            "name": name,
            "namespace": "ml",
            "uid": f"{name}-uid",
            "finalizers": ["example.com/kubelet-stopping"],
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job_raw["metadata"]["name"],
                    "uid": "x",
                    "controller": True,
                }
            ],
        },
        "spec": template["spec"],
    }
    return name


def test_nodes_become_the_pools_inventory_and_cordoned_or_not_ready_nodes_leave_it(
    watched_apiserver: kmock.KubernetesEmulator,
    controller: ControllerFactory,
    admin: Client,
    pool: str,
    core: CoreV1Api,
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 8)
    watched_apiserver.objects[NODES, None, "gpu-b"] = node("gpu-b", pool, 4)
    watched_apiserver.objects[NODES, None, "elsewhere"] = node("elsewhere", "other-pool", 8)
    single = node("mig-c", pool, 14)  # the device plugin's single MIG strategy: slices as nvidia.com/gpu
    single["metadata"]["labels"] |= {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia.com/gpu.memory": "4864",
    }
    watched_apiserver.objects[NODES, None, "mig-c"] = single
    controller()

    def hosts() -> dict[str, int]:
        return {entry["host"]["name"]: len(entry["host"]["gpus"]) for entry in admin.get(f"/v1/pools/{pool}/hosts")}

    eventually(lambda: hosts() == {"gpu-a": 8, "gpu-b": 4, "mig-c": 1})
    status = admin.get(f"/v1/pools/{pool}/status")
    assert status["capacity"]["gpu"] == 12 and status["capacity"]["mig.1g.5gb"] == 14

    core.patch_node("gpu-b", {"spec": {"unschedulable": True}}, _content_type=MERGE)
    eventually(lambda: hosts() == {"gpu-a": 8, "mig-c": 1})
    core.patch_node("gpu-b", {"spec": {"unschedulable": False}}, _content_type=MERGE)
    eventually(lambda: hosts() == {"gpu-a": 8, "gpu-b": 4, "mig-c": 1})
    core.patch_node("gpu-a", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, _content_type=MERGE)
    eventually(lambda: hosts() == {"gpu-b": 4, "mig-c": 1})


def test_a_job_is_suspended_queued_then_admitted_on_the_granted_node(
    watched_apiserver: kmock.KubernetesEmulator, controller: ControllerFactory, admin: Client, pool: str
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 8)
    watched_apiserver.objects[JOBS, "ml", "train"] = job("train", "uid-train", {"nvidia.com/gpu": "2"}, pool=pool)
    controller()

    admitted = eventually(lambda: in_state(watched_apiserver, JOBS, "train", "admitted"))

    (request,) = requests_of(admin, "uid-train")
    assert request.resources["gpu"] == 2000 and request.subject == f"team-{pool}" and request.pools == [pool]
    lease_id = request.lease_id
    assert notes(admitted)[names.LEASE_ID] == lease_id
    assert admitted["metadata"]["labels"][names.LEASE_ID] == lease_id
    assert admitted["spec"]["suspend"] is False
    template = admitted["spec"]["template"]
    assert template["metadata"]["labels"][names.LEASE_ID] == lease_id
    assert hostname_values(template["spec"]) == ["gpu-a"]
    assert (
        template["spec"]["containers"]
        == job("train", "u", {"nvidia.com/gpu": "2"}, pool=pool)["spec"]["template"]["spec"]["containers"]
    )
    # It was held first: the controller suspended the Job before asking for the lease.
    patches = [r.data for r in watched_apiserver if r.method == "PATCH" and r.name == "train"]
    assert patches[0] == {"spec": {"suspend": True}}
    eventually(lambda: "Admitted" in event_reasons(watched_apiserver, "train"))  # recorded just after the write
    assert admin.get_lease(lease_id).state in (RequestState.ACTIVE, RequestState.GRANTED)


def test_an_indexed_job_is_one_gang_over_several_nodes(
    watched_apiserver: kmock.KubernetesEmulator, controller: ControllerFactory, admin: Client, pool: str
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 4)
    watched_apiserver.objects[NODES, None, "gpu-b"] = node("gpu-b", pool, 4)
    indexed = job(
        "ddp",
        "uid-ddp",
        {"nvidia.com/gpu": "4"},
        suspend=True,
        completionMode="Indexed",
        completions=2,
        parallelism=2,
        pool=pool,
    )
    watched_apiserver.objects[JOBS, "ml", "ddp"] = indexed
    controller()

    admitted = eventually(lambda: in_state(watched_apiserver, JOBS, "ddp", "admitted"))

    (request,) = requests_of(admin, "uid-ddp")
    assert request.replicas == 2 and request.resources["gpu"] == 4000
    assert sorted(hostname_values(admitted["spec"]["template"]["spec"])) == ["gpu-a", "gpu-b"]
    # One pod per granted node: the pods of the lease repel each other on a hostname.
    (spread,) = admitted["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert spread == {
        "labelSelector": {"matchLabels": {names.LEASE_ID: request.lease_id}},
        "topologyKey": "kubernetes.io/hostname",
    }


def test_a_gated_pod_waits_then_its_gate_is_lifted_on_grant(
    watched_apiserver: kmock.KubernetesEmulator,
    controller: ControllerFactory,
    admin: Client,
    pool: str,
    core: CoreV1Api,
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 2)
    controller()
    wait_for_hosts(admin, pool)
    blocker = admin.submit(
        RequestSpec(subject=f"team-{pool}", resources={"gpu": 2}, pools=[pool], preemptible=True), wait=5
    )
    core.create_namespaced_pod("ml", gated_pod("notebook", "uid-nb", {"nvidia.com/gpu": "1"}, pool=pool))

    waiting = eventually(lambda: in_state(watched_apiserver, PODS, "notebook", "waiting"))
    assert "no_capacity" in notes(waiting)[names.REASON] or "waiting" in notes(waiting)[names.REASON]
    assert waiting["spec"]["schedulingGates"] == [{"name": "respools.io/admission"}]
    eventually(lambda: "Waiting" in event_reasons(watched_apiserver, "notebook"))  # recorded just after the write

    assert blocker.lease_id is not None
    admin.release(blocker.lease_id)
    admitted = eventually(lambda: in_state(watched_apiserver, PODS, "notebook", "admitted"))
    assert not admitted["spec"].get("schedulingGates")
    assert hostname_values(admitted["spec"]) == ["gpu-a"]


def labelled_namespace(name: str, pool: str) -> dict[str, Any]:
    """A Namespace labelled for the pool and its subject: everything in it asks for a respools lease."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": workload_labels(pool)}}


def test_a_namespace_labelled_for_a_pool_admits_its_unlabelled_workloads_for_its_subject(
    watched_apiserver: kmock.KubernetesEmulator, controller: ControllerFactory, admin: Client, pool: str
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 8)
    watched_apiserver.objects["v1/namespaces", None, "ml"] = labelled_namespace("ml", pool)
    unlabelled_job = job("train", "uid-ns-job", {"nvidia.com/gpu": "2"}, pool=pool)
    unlabelled_job["metadata"]["labels"] = {}
    unlabelled_pod = gated_pod("notebook", "uid-ns-pod", {"nvidia.com/gpu": "1"}, pool=pool)
    unlabelled_pod["metadata"]["labels"] = {}
    watched_apiserver.objects[JOBS, "ml", "train"] = unlabelled_job
    watched_apiserver.objects[PODS, "ml", "notebook"] = unlabelled_pod
    # The same Job in a namespace nobody labelled is none of respools' business.
    watched_apiserver.objects["v1/namespaces", None, "other"] = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "other"},
    }
    watched_apiserver.objects[JOBS, "other", "train"] = {
        **unlabelled_job,
        "metadata": {"name": "train", "namespace": "other", "uid": "uid-ns-other", "labels": {}},
    }
    made = controller()

    admitted = eventually(lambda: in_state(watched_apiserver, JOBS, "train", "admitted"))
    (request,) = requests_of(admin, "uid-ns-job")
    assert request.pools == [pool] and request.subject == f"team-{pool}" and request.resources["gpu"] == 2000
    assert hostname_values(admitted["spec"]["template"]["spec"]) == ["gpu-a"]
    pod = eventually(lambda: in_state(watched_apiserver, PODS, "notebook", "admitted"))
    assert not pod["spec"].get("schedulingGates")
    (pod_request,) = requests_of(admin, "uid-ns-pod")
    assert pod_request.pools == [pool] and pod_request.subject == f"team-{pool}"
    passes = made.passes
    eventually(lambda: made.passes >= passes + 2)
    assert requests_of(admin, "uid-ns-other") == []
    assert names.STATE not in notes(obj(watched_apiserver, JOBS, "train", "other"))


def test_bad_input_is_rejected_with_the_reason_once_not_retried(
    watched_apiserver: kmock.KubernetesEmulator, controller: ControllerFactory, admin: Client, pool: str
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 8)
    watched_apiserver.objects[JOBS, "ml", "mig"] = job("mig", "uid-mig", {"nvidia.com/mig-3g.40gb": "1"}, pool=pool)
    watched_apiserver.objects[JOBS, "ml", "huge"] = job("huge", "uid-huge", {"nvidia.com/gpu": "16"}, pool=pool)
    made = controller()

    for name in ("mig", "huge"):

        def is_rejected(n: str = name) -> dict[str, Any] | None:
            return in_state(watched_apiserver, JOBS, n, "rejected")

        rejected = eventually(is_rejected)
        assert rejected["spec"]["suspend"] is True
        assert notes(rejected)[names.REASON]

        def recorded(n: str = name) -> bool:
            return "Rejected" in event_reasons(watched_apiserver, n)  # recorded just after the write

        eventually(recorded)
    assert "'3g.40gb'" in notes(obj(watched_apiserver, JOBS, "mig"))[names.REASON]
    assert "no MIG slices" in notes(obj(watched_apiserver, JOBS, "mig"))[names.REASON]
    assert "largest node" in notes(obj(watched_apiserver, JOBS, "huge"))[names.REASON]
    passes = made.passes
    eventually(lambda: made.passes >= passes + 3)
    # Refused before asking: no request is queued for them, now or on later passes.
    assert requests_of(admin, "uid-mig") == [] and requests_of(admin, "uid-huge") == []
    assert event_reasons(watched_apiserver, "mig").count("Rejected") == 1


def test_a_mig_profile_the_pools_gpus_lack_is_rejected_while_one_they_offer_is_admitted(
    watched_apiserver: kmock.KubernetesEmulator, controller: ControllerFactory, admin: Client, pool: str
) -> None:
    mig_node = node("gpu-mig", pool, 7)
    mig_node["metadata"]["labels"] |= {"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.count": "8"}
    mig_node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "7"  # one H100 split in seven
    watched_apiserver.objects[NODES, None, "gpu-mig"] = mig_node
    watched_apiserver.objects[JOBS, "ml", "lacked"] = job(
        "lacked", "uid-lacked", {"nvidia.com/mig-3g.40gb": "1"}, pool=pool
    )
    watched_apiserver.objects[JOBS, "ml", "too-many"] = job(
        "too-many", "uid-too-many", {"nvidia.com/mig-1g.10gb": "8"}, pool=pool
    )
    watched_apiserver.objects[JOBS, "ml", "fits"] = job("fits", "uid-fits", {"nvidia.com/mig-1g.10gb": "2"}, pool=pool)
    made = controller()

    lacked = eventually(lambda: in_state(watched_apiserver, JOBS, "lacked", "rejected"))
    assert "'3g.40gb'" in notes(lacked)[names.REASON] and "offer 1g.10gb" in notes(lacked)[names.REASON]
    too_many = eventually(lambda: in_state(watched_apiserver, JOBS, "too-many", "rejected"))
    assert "8 MIG slices '1g.10gb'" in notes(too_many)[names.REASON]
    eventually(lambda: in_state(watched_apiserver, JOBS, "fits", "admitted"))
    passes = made.passes
    eventually(lambda: made.passes >= passes + 3)
    assert requests_of(admin, "uid-lacked") == [] and requests_of(admin, "uid-too-many") == []
    assert event_reasons(watched_apiserver, "lacked").count("Rejected") == 1
    assert notes(obj(watched_apiserver, JOBS, "lacked"))[names.STATE] == "rejected"  # not retried later


def test_preemption_warns_deletes_with_the_grace_left_holds_capacity_until_pods_go_then_requeues(
    watched_apiserver: kmock.KubernetesEmulator,
    controller: ControllerFactory,
    admin: Client,
    pool: str,
    core: CoreV1Api,
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 2)
    watched_apiserver.objects[JOBS, "ml", "train"] = job("train", "uid-pre", {"nvidia.com/gpu": "2"}, pool=pool)
    controller()
    admitted = eventually(lambda: in_state(watched_apiserver, JOBS, "train", "admitted"))
    first_lease = notes(admitted)[names.LEASE_ID]
    pod = job_pod(watched_apiserver, admitted, 0)

    admin.preempt_lease(first_lease, message="make room", grace_s=30)
    noticed = eventually(lambda: in_state(watched_apiserver, JOBS, "train", "preempting"))
    assert notes(noticed)[names.PREEMPT_DEADLINE] and notes(noticed)[names.PREEMPT_REASON]
    assert noticed["spec"]["suspend"] is True  # suspended, not failed
    deletion = eventually(lambda: [r for r in watched_apiserver if r.method == "DELETE" and r.name == pod])
    assert 25 <= int(deletion[0].params["gracePeriodSeconds"]) <= 30
    eventually(lambda: "Preempted" in event_reasons(watched_apiserver, "train"))  # recorded just after the write

    # The pod is still terminating (its finalizer): the capacity stays with the preempted lease.
    waiter = admin.submit(
        RequestSpec(subject=f"team-{pool}", resources={"gpu": 2}, pools=[pool], preemptible=True), wait=1
    )
    time.sleep(1.0)
    assert admin.get_lease(first_lease).state == RequestState.PREEMPTING
    assert admin.get_request(waiter.id).state == RequestState.PENDING
    admin.cancel_request(waiter.id)

    core.patch_namespaced_pod(pod, "ml", {"metadata": {"finalizers": []}}, _content_type=MERGE)
    readmitted = eventually(
        lambda: (
            (j := in_state(watched_apiserver, JOBS, "train", "admitted"))
            and notes(j).get(names.LEASE_ID) != first_lease
            and j
        )
    )
    assert notes(readmitted)[names.ATTEMPT] == "1"
    assert admin.get_lease(first_lease).state == RequestState.PREEMPTED
    (request,) = requests_of(admin, "uid-pre")
    assert request.attempt == 1
    eventually(lambda: "Requeued" in event_reasons(watched_apiserver, "train"))  # recorded just after the write
    assert hostname_values(readmitted["spec"]["template"]["spec"]) == ["gpu-a"]  # placed afresh, not ANDed


def test_a_restarted_controller_grants_nothing_twice_and_loses_no_workload(
    watched_apiserver: kmock.KubernetesEmulator,
    controller: ControllerFactory,
    admin: Client,
    pool: str,
    batch: BatchV1Api,
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 2)
    first = controller("replica-a")
    wait_for_hosts(admin, pool)
    blocker = admin.submit(
        RequestSpec(subject=f"team-{pool}", resources={"gpu": 2}, pools=[pool], preemptible=True), wait=5
    )
    batch.create_namespaced_job("ml", job("train", "uid-restart", {"nvidia.com/gpu": "2"}, pool=pool))
    eventually(lambda: notes(obj(watched_apiserver, JOBS, "train")).get(names.STATE) == "waiting")
    first.stop()

    assert blocker.lease_id is not None
    admin.release(blocker.lease_id)
    second = controller("replica-b")
    admitted = eventually(lambda: in_state(watched_apiserver, JOBS, "train", "admitted"))
    lease_id = notes(admitted)[names.LEASE_ID]
    second.stop()
    third = controller("replica-c")
    passes = third.passes
    eventually(lambda: third.passes >= passes + 3)

    (request,) = requests_of(admin, "uid-restart")
    assert request.lease_id == lease_id and request.state in (RequestState.ACTIVE, RequestState.GRANTED)
    assert notes(obj(watched_apiserver, JOBS, "train"))[names.LEASE_ID] == lease_id
    assert len(admin.list_leases(pool=pool, live=True)) == 1

    # Deleted while no controller watches: the next one finds the orphaned request and gives the lease back.
    third.stop()
    batch.delete_namespaced_job("train", "ml")
    controller("replica-d")
    eventually(lambda: admin.get_lease(lease_id).state == RequestState.RELEASED)


def test_only_the_leader_acts_and_another_replica_takes_over(
    watched_apiserver: kmock.KubernetesEmulator,
    controller: ControllerFactory,
    admin: Client,
    pool: str,
    batch: BatchV1Api,
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 2)
    a, b = controller("replica-a"), controller("replica-b")
    eventually(lambda: a.elector.leading or b.elector.leading)
    time.sleep(1.0)
    assert a.elector.leading != b.elector.leading
    leader, follower = (a, b) if a.elector.leading else (b, a)
    leader.stop()
    eventually(lambda: follower.elector.leading)
    batch.create_namespaced_job("ml", job("train", "uid-leader", {"nvidia.com/gpu": "1"}, pool=pool))
    eventually(lambda: notes(obj(watched_apiserver, JOBS, "train")).get(names.STATE) == "admitted")


def test_a_watch_answered_410_gone_relists_and_goes_on(
    watched_apiserver: kmock.KubernetesEmulator,
    controller: ControllerFactory,
    admin: Client,
    pool: str,
    core: CoreV1Api,
) -> None:
    gone = {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": 410,
            "reason": "Expired",
            "message": "too old resource version",
        },
    }
    # One event line, newline-terminated as an API server writes every watch event.
    watched_apiserver[kmock.action.WATCH, kmock.resource(PODS)][:1] << json.dumps(gone).encode() + b"\n"
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 2)
    made = controller()
    eventually(lambda: made.workloads["Pod"].relists >= 1)
    pod_lists = [r for r in watched_apiserver if r.method == "GET" and str(r.url.path) == "/api/v1/pods"]
    assert [r.params.get("watch") for r in pod_lists[:3]] == [None, "true", None]  # list, watch (410), list
    assert pod_lists[1].params["allowWatchBookmarks"] == "True"
    core.create_namespaced_pod("ml", gated_pod("late", "uid-late", {"nvidia.com/gpu": "1"}, pool=pool))
    eventually(lambda: notes(obj(watched_apiserver, PODS, "late")).get(names.STATE) == "admitted")


def test_a_preempted_pod_marked_requeue_is_created_again_gated_and_admitted_again(
    watched_apiserver: kmock.KubernetesEmulator,
    controller: ControllerFactory,
    admin: Client,
    pool: str,
    core: CoreV1Api,
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 2)
    controller()
    wait_for_hosts(admin, pool)
    core.create_namespaced_pod(
        "ml", gated_pod("worker", "uid-w", {"nvidia.com/gpu": "1"}, pool=pool, **{"respools.io/requeue": "true"})
    )
    core.create_namespaced_pod("ml", gated_pod("once", "uid-once", {"nvidia.com/gpu": "1"}, pool=pool))
    worker = eventually(lambda: in_state(watched_apiserver, PODS, "worker", "admitted"))
    once = eventually(lambda: in_state(watched_apiserver, PODS, "once", "admitted"))

    admin.preempt_lease(notes(worker)[names.LEASE_ID], grace_s=30)
    admin.preempt_lease(notes(once)[names.LEASE_ID], grace_s=30)

    again = eventually(
        lambda: (
            (p := in_state(watched_apiserver, PODS, "worker", "admitted"))
            and notes(p)[names.LEASE_ID] != notes(worker)[names.LEASE_ID]
            and p
        )
    )
    assert notes(again)[names.ATTEMPT] == "1"
    assert not again["spec"].get("schedulingGates")
    assert hostname_values(again["spec"]) == ["gpu-a"]
    deletions = [r for r in watched_apiserver if r.method == "DELETE" and r.name in ("worker", "once")]
    assert {r.name for r in deletions} == {"worker", "once"}
    assert all(25 <= int(r.params["gracePeriodSeconds"]) <= 30 for r in deletions)
    # Without respools.io/requeue the pod ends preempted: gone, its request not retried.
    eventually(lambda: requests_of(admin, "uid-once")[0].state == RequestState.PREEMPTED)
    assert ("ml", "once") not in {(ns, n) for (k, ns, n), o in watched_apiserver.objects.items() if not o.deleted}


def test_at_the_deadline_the_pods_are_deleted_without_grace(
    watched_apiserver: kmock.KubernetesEmulator, controller: ControllerFactory, admin: Client, pool: str
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 2)
    watched_apiserver.objects[JOBS, "ml", "train"] = job("train", "uid-deadline", {"nvidia.com/gpu": "1"}, pool=pool)
    controller()
    admitted = eventually(lambda: in_state(watched_apiserver, JOBS, "train", "admitted"))
    pod = job_pod(watched_apiserver, admitted, 0)  # it has a finalizer: deletion alone does not end it

    admin.preempt_lease(notes(admitted)[names.LEASE_ID], grace_s=1)

    graces = eventually(
        lambda: (
            (g := [r.params["gracePeriodSeconds"] for r in watched_apiserver if r.method == "DELETE" and r.name == pod])
            and "0" in g
            and g
        )
    )
    assert graces[0] == "1" and graces[-1] == "0"
    # Past the deadline the Job stays suspended while its pod is still there, whatever the service did
    # with the lease; once the pod is gone the Job runs again on its next lease.
    time.sleep(1.0)
    assert obj(watched_apiserver, JOBS, "train")["spec"]["suspend"] is True
    CoreV1Api(ApiClient(Configuration(host=str(watched_apiserver.url).rstrip("/")))).patch_namespaced_pod(
        pod, "ml", {"metadata": {"finalizers": []}}, _content_type=MERGE
    )
    again = eventually(
        lambda: (
            (j := in_state(watched_apiserver, JOBS, "train", "admitted"))
            and notes(j)[names.LEASE_ID] != notes(admitted)[names.LEASE_ID]
            and j
        )
    )
    assert again["spec"]["suspend"] is False and notes(again)[names.ATTEMPT] == "1"


def test_a_finished_or_deleted_job_gives_its_lease_back(
    watched_apiserver: kmock.KubernetesEmulator,
    controller: ControllerFactory,
    admin: Client,
    pool: str,
    batch: BatchV1Api,
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 2)
    watched_apiserver.objects[JOBS, "ml", "done"] = job("done", "uid-done", {"nvidia.com/gpu": "1"}, pool=pool)
    watched_apiserver.objects[JOBS, "ml", "gone"] = job("gone", "uid-gone", {"nvidia.com/gpu": "1"}, pool=pool)
    controller()
    done = eventually(lambda: in_state(watched_apiserver, JOBS, "done", "admitted"))
    gone = eventually(lambda: in_state(watched_apiserver, JOBS, "gone", "admitted"))

    complete = {"status": {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}}
    batch.patch_namespaced_job_status("done", "ml", complete, _content_type=MERGE)
    batch.delete_namespaced_job("gone", "ml")

    ended = [notes(done)[names.LEASE_ID], notes(gone)[names.LEASE_ID]]
    eventually(lambda: all(admin.get_lease(lease_id).state == RequestState.RELEASED for lease_id in ended))
    assert notes(obj(watched_apiserver, JOBS, "done"))[names.STATE] == "finished"
    assert admin.list_leases(pool=pool, live=True) == []


def test_the_controller_keeps_its_workloads_leases_with_batch_heartbeats(
    watched_apiserver: kmock.KubernetesEmulator,
    controller: ControllerFactory,
    admin: Client,
    server: ServerProcess,
    pool: str,
) -> None:
    """One batch heartbeat renews every admitted workload's lease (the process's LeaseKeeper): after
    the first heartbeat that starts each lease, the passes (every 0.2 s here) heartbeat none of their own."""
    spec = admin.get(f"/v1/pools/{pool}")
    admin.put(f"/v1/pools/{pool}", {key: spec[key] for key in ("name", "stack", "settings")} | {"lease_ttl_s": 1.0})
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 3)
    for i in range(3):
        watched_apiserver.objects[JOBS, "ml", f"train-{i}"] = job(
            f"train-{i}", f"uid-hb-{i}", {"nvidia.com/gpu": "1"}, pool=pool
        )
    controller()
    admitted = [
        eventually(functools.partial(in_state, watched_apiserver, JOBS, f"train-{i}", "admitted")) for i in range(3)
    ]
    lease_ids = [notes(obj)[names.LEASE_ID] for obj in admitted]

    def started(lease_id: str) -> Any:
        lease = admin.get_lease(lease_id)
        return lease.state == RequestState.ACTIVE and lease.expires_at

    # A Job is annotated admitted just before the first heartbeat: until that one, its lease is granted
    # and expires at the pool's init timeout, far later than any 1 s renewal.
    first = [eventually(functools.partial(started, lease_id)) for lease_id in lease_ids]

    singles, batches = heartbeat_calls(server)
    time.sleep(2.5)  # well past the 1 s TTL: only heartbeats keep the leases

    for lease_id, expires_at in zip(lease_ids, first, strict=True):
        lease = admin.get_lease(lease_id)
        assert lease.state == RequestState.ACTIVE
        assert lease.expires_at > expires_at
    now_singles, now_batches = heartbeat_calls(server)
    assert now_singles == singles, "no lease heartbeated on its own once started (passes ran meanwhile)"
    assert now_batches - batches >= 3, "renewed together, every third of the TTL"


def heartbeat_calls(server: ServerProcess) -> tuple[float, float]:
    """Heartbeats the server answered so far: of one lease each, and batches."""
    counts = {"/v1/leases/{lease_id}/heartbeat": 0.0, "/v1/leases/heartbeat": 0.0}
    for line in httpx.get(f"{server.url}/metrics", timeout=10).text.splitlines():
        if line.startswith("respools_http_requests_total{"):
            route = line.split('route="', 1)[1].split('"', 1)[0]
            if route in counts:
                counts[route] += float(line.rsplit(" ", 1)[1])
    return counts["/v1/leases/{lease_id}/heartbeat"], counts["/v1/leases/heartbeat"]


def test_a_watch_resumes_from_the_version_its_last_bookmark_gave(
    watched_apiserver: kmock.KubernetesEmulator, controller: ControllerFactory, pool: str
) -> None:
    bookmark = {
        "type": "BOOKMARK",
        "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "4242"}},
    }
    watched_apiserver[kmock.action.WATCH, kmock.resource(PODS)][:1] << json.dumps(bookmark).encode() + b"\n"
    made = controller()

    def pod_watches() -> list[Any]:
        return [r for r in watched_apiserver if str(r.url.path) == "/api/v1/pods" and r.params.get("watch") == "true"]

    eventually(lambda: len(pod_watches()) >= 2)
    first, second = pod_watches()[:2]
    assert first.params["allowWatchBookmarks"] == "True"
    assert second.params["resourceVersion"] == "4242"  # resumed, not listed again
    assert made.workloads["Pod"].relists == 0


def test_the_console_script_runs_the_controller_until_sigterm(
    watched_apiserver: kmock.KubernetesEmulator, server: ServerProcess, admin: Client, pool: str, tmp_path: Path
) -> None:
    watched_apiserver.objects[NODES, None, "gpu-a"] = node("gpu-a", pool, 4)
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "mock", "cluster": {"server": str(watched_apiserver.url).rstrip("/")}}],
        "users": [{"name": "mock", "user": {"token": "t"}}],
        "contexts": [{"name": "mock", "context": {"cluster": "mock", "user": "mock"}}],
        "current-context": "mock",
    }
    (tmp_path / "kubeconfig").write_text(json.dumps(kubeconfig))
    command = [
        sys.executable,
        "-m",
        "respools_kubernetes.cli",
        "controller",
        "--kubeconfig",
        str(tmp_path / "kubeconfig"),
    ]
    env = {**os.environ, "RESPOOLS_URL": server.url, "RESPOOLS_TOKEN": ADMIN_TOKEN}
    with (tmp_path / "controller.log").open("wb") as log:
        process = subprocess.Popen([*command, "--resync-s", "0.2"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        eventually(lambda: [e["host"]["name"] for e in admin.get(f"/v1/pools/{pool}/hosts")] == ["gpu-a"])
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=20)
    assert code == 0, (tmp_path / "controller.log").read_text()
    assert "leads" in (tmp_path / "controller.log").read_text()

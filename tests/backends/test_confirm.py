"""Confirming a stop on the local stack, with the fake NVML driver: an overdue lease's GPUs are handed over
only once its process group is gone and NVML lists no compute process of it on the lease's GPUs."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import time
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

with warnings.catch_warnings():  # starlette nudges towards httpx2, which the project does not use
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from respools.backends.local import LocalBackend, procfs, register_holder
from respools.backends.local import backend as local_backend
from respools.backends.local.confirm import confirm_gone
from respools.backends.local.holders import HolderRegistry
from respools.model import Lease, RequestState
from respools.server import Settings, create_app
from tests.backends.fake_nvml import FakeDriver, FakeProcess
from tests.backends.helpers import H100_UUID, HOST, POOL, T0, make_lease, make_pool, two_gpu_driver, whole
from tests.backends.test_agent import FakeServer, make_agent

UseDriver = Callable[[FakeDriver], FakeDriver]
Spawn = Callable[..., subprocess.Popen[bytes]]
IGNORES_SIGTERM = ("sh", "-c", "trap '' TERM; sleep 60 & wait")
ADMIN = "rp_confirm_admin"


def test_the_agent_confirms_only_once_the_group_is_gone_and_nvml_lists_none_of_it(
    use_driver: UseDriver, spawn: Spawn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_backend, "CONFIRM_SETTLE_S", 0.2)
    workload = spawn(*IGNORES_SIGTERM)
    driver = use_driver(two_gpu_driver([FakeProcess(workload.pid, 30000)]))
    server = FakeServer()
    server.pool["settings"] = {"stop_kill_after_s": 0.2}
    lease = make_lease(whole(), state=RequestState.PREEMPTING, preempt_deadline=T0 - timedelta(seconds=1))
    register_holder(lease, pid=workload.pid)
    server.leases[lease.id] = lease.model_dump(mode="json")
    agent = make_agent(server)

    first = agent.tick()
    assert first.stopped == [lease.id] and workload.wait(timeout=5) == -signal.SIGKILL
    assert first.confirmed == [] and server.sent("POST", "/stopped") == [], (
        "NVML still lists the killed process: its memory is not free yet"
    )

    owner = spawn()  # the driver released the killed one; the next holder's process is already there
    driver.gpus[1].processes = [FakeProcess(owner.pid, 500)]
    second = agent.tick()
    assert second.confirmed == [lease.id] and second.stopped == []
    (posted,) = server.sent("POST", "/stopped")
    body = json.loads(posted.content)
    assert posted.url.path == f"/v1/leases/{lease.id}/stopped"
    assert body["backend"] == "local" and body["host"] == "gpu-a"
    assert f"process group {workload.pid} has no live process" in body["evidence"] and H100_UUID in body["evidence"]
    assert agent.backend.registry.registered() == [], "a confirmed registration is removed"
    assert agent.tick().confirmed == [], "confirmed once"


def test_a_live_member_of_the_group_is_not_confirmed(spawn: Spawn) -> None:
    workload = spawn(*IGNORES_SIGTERM)
    lease = make_lease(whole(), state=RequestState.PREEMPTING)
    registry = HolderRegistry()
    register_holder(lease, pid=workload.pid, directory=registry.directory)
    holder = registry.get(lease.id)
    assert holder is not None
    assert confirm_gone(holder, lambda uuids: {uuid: [] for uuid in uuids}) is None
    os.killpg(workload.pid, signal.SIGKILL)
    workload.wait(timeout=5)
    _wait_group_gone(workload.pid)
    assert confirm_gone(holder, lambda uuids: {uuid: [] for uuid in uuids}) is not None


def test_another_workload_on_the_gpu_does_not_block_the_confirmation(spawn: Spawn) -> None:
    """The new owner's process (alive, in another group) may already be listed; a GPU NVML does not show,
    or no driver at all, is never vouched for."""
    gone, other = spawn(), spawn()
    lease = make_lease(whole(), state=RequestState.PREEMPTING)
    registry = HolderRegistry()
    register_holder(lease, pid=gone.pid, directory=registry.directory)
    holder = registry.get(lease.id)
    assert holder is not None
    gone.kill()
    gone.wait(timeout=5)
    _wait_group_gone(gone.pid)
    assert confirm_gone(holder, lambda uuids: {H100_UUID: [other.pid]}) is not None
    assert confirm_gone(holder, lambda uuids: {}) is None


def test_the_backend_without_a_driver_confirms_nothing(spawn: Spawn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_backend, "CONFIRM_SETTLE_S", 0.2)
    gone = spawn()
    lease = make_lease(whole(), state=RequestState.PREEMPTING)
    backend = LocalBackend()
    register_holder(lease, pid=gone.pid, directory=backend.registry.directory)
    gone.kill()
    gone.wait(timeout=5)
    _wait_group_gone(gone.pid)
    assert backend.confirm_stopped(lease, make_pool()) is None, "NVML cannot be asked: wait for release or TTL"
    assert backend.registry.get(lease.id, include_dead=True) is not None, "kept for a later confirmation"


def _wait_group_gone(pgid: int) -> None:
    deadline = time.monotonic() + 5
    while next(procfs.group_members(pgid), None) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_the_service_stops_an_overdue_local_workload_and_hands_over_on_confirmation(
    use_driver: UseDriver, spawn: Spawn, tmp_path: Path
) -> None:
    """The embedded service on this host: at the deadline its stopper kills the registered group (which
    ignores SIGTERM), the local backend confirms the stop with NVML, and the lease ends on that."""
    use_driver(two_gpu_driver())
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'respools.db'}", admin_token=ADMIN, tick_s=0.05, log_json=False
    )
    gpu = {"uuid": H100_UUID, "index": 1, "model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559}
    pool = {
        "name": POOL,
        "stack": "local",
        "inventory": [{"name": HOST, "gpus": [gpu]}],
        "preemption_grace_s": 0.3,
        "lease_ttl_s": 60,
        "settings": {"stop_kill_after_s": 0.2},
    }
    with TestClient(create_app(settings)) as api:
        call = functools.partial(api.request, headers={"Authorization": f"Bearer {ADMIN}"})
        assert call("PUT", f"/v1/pools/{POOL}", json=pool).status_code == 201
        call("PUT", "/v1/subjects/vision", json={"name": "vision"})
        call("POST", "/v1/policies", json={"subject": "vision", "pool": POOL, "reserved": {"gpu": 1}})
        request = call("POST", "/v1/requests?wait=5", json={"subject": "vision", "resources": {"gpu": 1}}).json()
        lease = Lease.model_validate(call("GET", f"/v1/leases/{request['lease_id']}").json())
        workload = spawn(*IGNORES_SIGTERM)
        register_holder(lease, pid=workload.pid)
        call("POST", f"/v1/leases/{lease.id}/heartbeat")
        call("POST", f"/v1/leases/{lease.id}/preempt", json={"grace_s": 0.3})

        ended = call("GET", f"/v1/requests/{lease.request_id}/wait?state=preempting&timeout=10").json()
        assert ended["state"] == "preempted", ended
        assert workload.wait(timeout=5) == -signal.SIGKILL
        events = call("GET", "/v1/events", params={"lease_id": lease.id}).json()
        kinds = [e["kind"] for e in events]
        assert kinds.index("overdue") < kinds.index("preempted")
        message = next(e["message"] for e in events if e["kind"] == "preempted")
        assert "confirmed by backend local" in message and H100_UUID in message, message

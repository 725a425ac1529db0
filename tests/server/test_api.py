"""The API end to end on SQLite and on PostgreSQL: the lease lifecycle, idempotency, long-polls,
cancellation, preemption with requeue, expiry, host reports, draining, reservations, events."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.server.conftest import Api


def kinds(api: Api, **filters: Any) -> list[str]:
    return [e["kind"] for e in api.ok("GET", "/v1/events", params={"limit": 1000} | filters)]


def wait_for(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_lease_lifecycle(api: Api) -> None:
    world = api.world()
    request = api.submit(world.token, resources={"gpu": 6}, preemptible=True, labels={"step": "train"})
    assert request["state"] == "granted", request
    # the long-poll answers from the state the reconciler handed over: it must be the stored one
    assert request == api.ok("GET", f"/v1/requests/{request['id']}", world.token)
    lease = api.ok("GET", f"/v1/leases/{request['lease_id']}", world.token)
    assert lease["resources"]["gpu"] == 6 and lease["borrowed"] == {"gpu": 2}
    assert lease["state"] == "granted" and lease["labels"] == {"step": "train"}

    beat = api.ok("POST", f"/v1/leases/{lease['id']}/heartbeat", world.token)
    assert beat["state"] == "active" and beat["started_at"] is not None
    assert api.ok("GET", f"/v1/requests/{request['id']}", world.token)["state"] == "active"

    released = api.ok("POST", f"/v1/leases/{lease['id']}/release", world.token)
    assert released["state"] == "released" and released["released_at"] is not None
    assert released == api.ok("GET", f"/v1/leases/{lease['id']}", world.token), "the answer is the stored lease"
    assert api.ok("GET", f"/v1/requests/{request['id']}", world.token)["state"] == "released"
    again = api.ok("POST", f"/v1/leases/{lease['id']}/release", world.token)
    assert again["state"] == "released", "release is idempotent"
    assert api.call("POST", f"/v1/leases/{lease['id']}/heartbeat", world.token).status_code == 409

    wait_for(lambda: kinds(api, request_id=request["id"]) == ["submitted", "granted", "released"])


def test_hot_answers_are_byte_for_byte_what_the_declared_model_gives(api: Api) -> None:
    """Submit, heartbeat and release serialize their answers themselves (routes.answers); reading a lease
    and listing requests still go through FastAPI's ``response_model``. One stored object, one reading."""
    world = api.world()
    submitted = api.call("POST", "/v1/requests?wait=5", world.token, json={"resources": {"gpu": 1}})
    request = submitted.json()
    assert submitted.headers["content-type"] == "application/json"
    listed = api.call("GET", "/v1/requests", world.token).content
    assert listed == b"[" + submitted.content + b"]"
    assert submitted.content == api.call("GET", f"/v1/requests/{request['id']}", world.token).content
    lease_path = f"/v1/leases/{request['lease_id']}"
    for action in ("heartbeat", "release"):
        answer = api.call("POST", f"{lease_path}/{action}", world.token)
        assert answer.status_code == 200 and answer.content == api.call("GET", lease_path, world.token).content


def test_idempotent_submit_returns_the_first_request(api: Api) -> None:
    world = api.world()
    first = api.call(
        "POST", "/v1/requests", world.token, json={"resources": {"gpu": 1}}, headers={"Idempotency-Key": "step-42"}
    )
    retry = api.call(
        "POST", "/v1/requests", world.token, json={"resources": {"gpu": 1}}, headers={"Idempotency-Key": "step-42"}
    )
    assert (first.status_code, retry.status_code) == (201, 200)
    assert first.json()["id"] == retry.json()["id"]
    body_key = api.call(
        "POST", "/v1/requests", world.token, json={"resources": {"gpu": 1}, "idempotency_key": "step-42"}
    )
    assert body_key.status_code == 200 and body_key.json()["id"] == first.json()["id"]
    different = api.call(
        "POST", "/v1/requests", world.token, json={"resources": {"gpu": 2}}, headers={"Idempotency-Key": "step-42"}
    )
    assert different.status_code == 409 and different.json()["field"] == "idempotency_key"


def test_wait_returns_when_the_state_changes(api: Api) -> None:
    world = api.world()
    holder = api.submit(world.token, resources={"gpu": 4})
    assert holder["state"] == "granted"
    queued = api.submit(world.token, wait=0.2, resources={"gpu": 1})
    assert queued["state"] == "pending"
    assert queued["wait_reason"] is None or queued["wait_reason"]
    started = time.monotonic()
    unchanged = api.wait_state(world.token, queued["id"], "pending", timeout=0.3)
    assert unchanged["state"] == "pending" and time.monotonic() - started >= 0.25
    pending = api.ok("GET", f"/v1/requests/{queued['id']}", world.token)
    assert pending["wait_reason"] == "reserved_share" and pending["reason"]
    api.ok("POST", f"/v1/leases/{holder['lease_id']}/release", world.token)
    granted = api.wait_state(world.token, queued["id"], "pending")
    assert granted["state"] == "granted" and granted["lease_id"]


def test_cancel_pending_and_leased_requests(api: Api) -> None:
    world = api.world()
    holder = api.submit(world.token, resources={"gpu": 4})
    queued = api.submit(world.token, wait=0.1, resources={"gpu": 2})
    assert queued["state"] == "pending"
    assert api.ok("POST", f"/v1/requests/{queued['id']}/cancel", world.token)["state"] == "cancelled"
    cancelled = api.ok("POST", f"/v1/requests/{holder['id']}/cancel", world.token)
    assert cancelled["state"] == "cancelled"
    assert api.ok("GET", f"/v1/leases/{holder['lease_id']}", world.token)["state"] == "released"
    assert api.ok("POST", f"/v1/requests/{holder['id']}/cancel", world.token)["state"] == "cancelled"
    wait_for(lambda: kinds(api, request_id=holder["id"]) == ["submitted", "granted", "cancelled"])


def test_rejection_says_why(api: Api) -> None:
    world = api.world()
    too_big = api.submit(world.token, resources={"gpu": 10}, preemptible=True)
    assert too_big["state"] == "rejected" and "gpu" in too_big["reason"]
    wait_for(lambda: kinds(api, request_id=too_big["id"]) == ["submitted", "rejected"])


def test_preemption_requeues_with_the_original_position(api: Api) -> None:
    """ZenML E16: sandbox borrows, prod (higher policy priority) reclaims; sandbox's request is requeued."""
    world = api.world(preemption_grace_s=30)
    prod = api.add_subject(world, "prod", reserved={"gpu": 2}, limit={"gpu": 8}, priority=100)
    held = [api.submit(world.token, resources={"gpu": 3}, preemptible=True, max_retries=1) for _ in range(2)]
    assert [h["state"] for h in held] == ["granted", "granted"]
    for h in held:
        api.ok("POST", f"/v1/leases/{h['lease_id']}/heartbeat", world.token)

    waiter = api.submit(prod, wait=0.5, resources={"gpu": 4}, preemptible=True)
    assert waiter["state"] == "pending"
    victims = wait_for(
        lambda: [lease for lease in api.ok("GET", "/v1/leases", params={"pool": world.pool, "state": "preempting"})]
    )
    assert len(victims) == 1 and victims[0]["preempt_deadline"] and victims[0]["preempted_for"] == waiter["id"]
    beat = api.ok("POST", f"/v1/leases/{victims[0]['id']}/heartbeat", world.token)
    assert beat["state"] == "preempting" and beat["preempt_reason"] in {"priority", "reclaim"}

    ended = api.ok("POST", f"/v1/leases/{victims[0]['id']}/release", world.token)
    assert ended["state"] == "preempted" and ended == api.ok("GET", f"/v1/leases/{victims[0]['id']}", world.token)
    assert api.wait_state(prod, waiter["id"], "pending")["state"] == "granted"
    requeued = api.ok("GET", f"/v1/requests/{victims[0]['request_id']}", world.token)
    original = next(h for h in held if h["id"] == requeued["id"])
    assert requeued["attempt"] == 1 and requeued["submitted_at"] == original["submitted_at"]
    assert requeued["state"] in {"pending", "granted"}
    wait_for(lambda: {"preempting", "preempted", "requeued"} <= set(kinds(api, request_id=requeued["id"])))


def test_an_overdue_lease_that_never_started_ends_with_its_init_window(api: Api) -> None:
    """Past the deadline the lease is overdue and keeps its capacity; a holder that never heartbeated is
    silent, so the lease ends once its initialization window passes, without retries."""
    world = api.world(preemption_grace_s=0.2, init_timeout_s=1.0)
    request = api.submit(world.token, resources={"gpu": 1})
    api.ok("POST", f"/v1/leases/{request['lease_id']}/preempt", json={"message": "maintenance"})
    preempting = api.ok("GET", f"/v1/leases/{request['lease_id']}", world.token)
    assert preempting["state"] == "preempting" and preempting["preempt_reason"] == "admin"
    overdue = wait_for(lambda: api.ok("GET", f"/v1/leases/{request['lease_id']}", world.token)["overdue_since"])
    assert api.ok("GET", f"/v1/leases/{request['lease_id']}", world.token)["state"] == "preempting", overdue
    ended = api.wait_state(world.token, request["id"], "preempting")
    assert ended["state"] == "preempted" and "retries" in ended["reason"] and "silent" in ended["reason"]
    assert api.ok("GET", f"/v1/leases/{request['lease_id']}", world.token)["state"] == "preempted"


def test_leases_that_never_start_expire(api: Api) -> None:
    world = api.world(init_timeout_s=0.3)
    request = api.submit(world.token, resources={"gpu": 1})
    ended = api.wait_state(world.token, request["id"], "granted")
    assert ended["state"] == "expired" and "never started" in ended["reason"]
    assert "expired" in kinds(api, request_id=request["id"])


def test_drained_pool_grants_nothing_until_resumed(api: Api) -> None:
    world = api.world()
    assert api.ok("POST", f"/v1/pools/{world.pool}/drain")["draining"] is True
    queued = api.submit(world.token, wait=0.3, resources={"gpu": 1})
    assert queued["state"] == "pending"
    wait_for(lambda: api.ok("GET", f"/v1/requests/{queued['id']}", world.token)["wait_reason"] == "pool_draining")
    api.ok("POST", f"/v1/pools/{world.pool}/resume")
    assert api.wait_state(world.token, queued["id"], "pending")["state"] == "granted"


def gpu(uuid: str, index: int) -> dict[str, Any]:
    return {"uuid": uuid, "index": index, "model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920}


def test_host_reports_feed_the_inventory_and_expire(api: Api) -> None:
    host = {"name": "node-a", "gpus": [gpu(f"GPU-{id(api)}-0", 0), gpu(f"GPU-{id(api)}-1", 1)]}
    world = api.world(capacity={}, hosts=[host])
    pool = world.pool
    renewed = api.call("PUT", f"/v1/pools/{pool}/hosts/node-a?ttl_s=30", json=host)
    assert renewed.status_code == 200 and renewed.json()["live"] is True
    status = api.ok("GET", f"/v1/pools/{pool}/status")
    assert status["capacity"]["gpu"] == 2 and status["live_hosts"] == 1

    request = api.submit(world.token, resources={"gpu": 1})
    assert request["state"] == "granted"
    lease = api.ok("GET", f"/v1/leases/{request['lease_id']}", world.token)
    assert lease["placement"]["items"][0]["host"] == "node-a"

    api.ok("PUT", f"/v1/pools/{pool}/hosts/node-a?ttl_s=0.3", json=host)
    wait_for(lambda: "host_lost" in kinds(api, pool=pool))
    status = api.ok("GET", f"/v1/pools/{pool}/status")
    assert status.get("capacity", {}).get("gpu", 0) == 0 and status["lost_hosts"] == 1
    assert api.ok("GET", f"/v1/leases/{lease['id']}", world.token)["state"] == "granted", "lease records stay"
    hosts = api.ok("GET", f"/v1/pools/{pool}/hosts")
    assert [h["live"] for h in hosts] == [False]
    api.ok("DELETE", f"/v1/pools/{pool}/hosts/node-a")
    assert api.ok("GET", f"/v1/pools/{pool}/hosts") == []


def test_reservations_and_definitions_round_trip(api: Api) -> None:
    world = api.world(capacity={"gpu": 8})
    start = datetime.now(UTC) + timedelta(hours=1)
    body = {
        "subject": world.subject,
        "pool": world.pool,
        "resources": {"gpu": 2},
        "start": start.isoformat(),
        "end": (start + timedelta(hours=2)).isoformat(),
    }
    created = api.ok("POST", "/v1/reservations", json=body)
    assert created["id"].startswith("rsv_")
    assert [r["id"] for r in api.ok("GET", "/v1/reservations", world.token)] == [created["id"]]
    assert api.ok("GET", f"/v1/reservations/{created['id']}", world.token)["resources"] == {"gpu": 2}
    api.ok("DELETE", f"/v1/reservations/{created['id']}")
    assert api.call("GET", f"/v1/reservations/{created['id']}").status_code == 404

    pool = api.ok("GET", f"/v1/pools/{world.pool}")
    assert pool["forms"] == ["fraction", "mig", "whole"], "forms default to what the backend expresses"
    replaced = api.call("PUT", f"/v1/pools/{world.pool}", json={"name": world.pool, "capacity": {"gpu": 6}})
    assert replaced.status_code == 200 and replaced.json()["capacity"] == {"gpu": 6}
    policy = api.ok("GET", f"/v1/policies/{world.pool}/{world.subject}", world.token)
    assert policy["reserved"] == {"gpu": 4}
    assert api.ok("GET", "/v1/whoami", world.token) == {
        "token_id": api.ok("GET", "/v1/whoami", world.token)["token_id"],
        "role": "subject",
        "subject": world.subject,
        "lease_id": None,
    }


def test_event_stream_delivers_new_events(api: Api) -> None:
    world = api.world()
    last = api.ok("GET", "/v1/events", params={"limit": 1000})
    after = last[-1]["id"] if last else 0
    request = api.submit(world.token, resources={"gpu": 1})
    wait_for(lambda: "granted" in kinds(api, request_id=request["id"]))
    seen: list[tuple[str, str]] = []
    with api.client.stream("GET", f"/v1/events/stream?after={after}", headers=api.admin) as stream:
        event = ""
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and request["id"] in line:
                seen.append((event, line))
            if [k for k, _ in seen] == ["submitted", "granted"]:
                break
    assert [k for k, _ in seen] == ["submitted", "granted"]


def test_operations_endpoints(api: Api) -> None:
    world = api.world()
    api.submit(world.token, resources={"gpu": 1})
    assert api.client.get("/healthz").json() == {"status": "ok"}
    ready = api.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["reconciler"] == "leader"
    metrics = api.client.get("/metrics").text
    assert f'respools_pool_capacity{{pool="{world.pool}",resource="gpu"}} 8.0' in metrics
    assert f'respools_pool_in_use{{pool="{world.pool}",resource="gpu"}} 1.0' in metrics
    assert "respools_grant_latency_seconds_bucket" in metrics
    assert 'respools_http_requests_total{method="POST",route="/v1/requests",status="201"}' in metrics
    schema = api.client.get("/openapi.json").json()
    assert "/v1/requests/{request_id}/wait" in schema["paths"] and "/v1/events/stream" in schema["paths"]


def test_overuse_reports_are_logged_and_can_preempt(api: Api) -> None:
    world = api.world()
    request = api.submit(world.token, resources={"gpu": 0.5})
    report = {
        "lease_id": request["lease_id"],
        "pool": world.pool,
        "host": "node-a",
        "gpu_uuid": "GPU-1",
        "pids": [42],
        "used_memory_mb": 50000,
        "cap_memory_mb": 40000,
        "tolerance_mb": 512,
        "preempt": False,
        "message": "pid 42 uses 50000 MiB of a 40000 MiB cap",
    }
    logged = api.ok("POST", f"/v1/leases/{request['lease_id']}/overuse", json=report)
    assert logged["state"] == "granted"
    preempted = api.ok("POST", f"/v1/leases/{request['lease_id']}/overuse", json=report | {"preempt": True})
    assert preempted["state"] == "preempting" and preempted["preempt_reason"] == "overuse"
    wait_for(lambda: kinds(api, request_id=request["id"]).count("overuse") == 2)

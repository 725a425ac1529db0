"""Safe handoff (DESIGN §2.8) on SQLite and PostgreSQL: past its grace deadline a preempting lease is
overdue and keeps its capacity; the waiter waits naming it; the capacity is handed over only on the
holder's release, a backend's confirmed stop, or a full TTL of the holder's silence."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from tests.server.conftest import Api, World
from tests.server.test_api import kinds, wait_for

GRACE_S = 0.3


def _lease(api: Api, world: World, lease_id: str) -> dict[str, Any]:
    lease: dict[str, Any] = api.ok("GET", f"/v1/leases/{lease_id}", world.token)
    return lease


def _overdue_victim(api: Api, **pool: Any) -> tuple[World, str, dict[str, Any], dict[str, Any]]:
    """ZenML E16 with a holder that ignores its notice: the sandbox's borrowed lease is preempted for
    prod and passes its deadline unreleased. Answers the world, prod's token, the waiter and the lease."""
    world = api.world(preemption_grace_s=GRACE_S, **pool)
    prod = api.add_subject(world, "prod", reserved={"gpu": 4}, limit={"gpu": 8}, priority=100)
    held = api.submit(world.token, resources={"gpu": 8}, preemptible=True, max_retries=1)
    api.ok("POST", f"/v1/leases/{held['lease_id']}/heartbeat", world.token)
    waiter = api.submit(prod, wait=0.2, resources={"gpu": 4}, preemptible=True)
    assert waiter["state"] == "pending"
    lease = wait_for(
        lambda: _lease(api, world, held["lease_id"])["overdue_since"] and _lease(api, world, held["lease_id"])
    )
    return world, prod, waiter, lease


def test_an_overdue_lease_keeps_its_capacity_until_its_holder_releases(api: Api) -> None:
    world, prod, waiter, lease = _overdue_victim(api, lease_ttl_s=30)
    assert lease["state"] == "preempting"
    assert datetime.fromisoformat(lease["overdue_since"]) >= datetime.fromisoformat(lease["preempt_deadline"])
    time.sleep(5 * 0.1)  # several reconciler ticks past the deadline: nothing is handed over
    waiting = api.ok("GET", f"/v1/requests/{waiter['id']}", prod)
    assert waiting["state"] == "pending" and waiting["wait_reason"] == "preempting"
    assert lease["id"] in waiting["reason"] and "overdue since" in waiting["reason"], waiting["reason"]
    assert "overdue" in kinds(api, lease_id=lease["id"])
    status = api.ok("GET", f"/v1/pools/{world.pool}/status")
    assert status["overdue_leases"] == 1 and status["in_use"]["gpu"] == 8
    assert f'respools_overdue_leases{{pool="{world.pool}"}} 1.0' in api.client.get("/metrics").text
    beat = api.ok("POST", f"/v1/leases/{lease['id']}/heartbeat", world.token)
    assert beat["state"] == "preempting" and beat["overdue_since"] == lease["overdue_since"]

    released = api.ok("POST", f"/v1/leases/{lease['id']}/release", world.token)
    assert released["state"] == "preempted"
    assert api.wait_state(prod, waiter["id"], "pending")["state"] == "granted"
    assert f'respools_overdue_leases{{pool="{world.pool}"}} 0.0' in api.client.get("/metrics").text


def test_a_backends_confirmed_stop_hands_the_capacity_over(api: Api) -> None:
    world, prod, waiter, lease = _overdue_victim(api, lease_ttl_s=30)
    body = {"backend": "local", "evidence": "process group 4242 has no live process", "host": "gpu-a"}
    refused = api.call("POST", f"/v1/leases/{lease['id']}/stopped", world.token, json=body)
    assert refused.status_code == 403, "only an admin token (an agent's, a runner's) confirms a stop"
    assert api.ok("GET", f"/v1/requests/{waiter['id']}", prod)["state"] == "pending"

    ended = api.ok("POST", f"/v1/leases/{lease['id']}/stopped", json=body)
    assert ended["state"] == "preempted"
    assert api.wait_state(prod, waiter["id"], "pending")["state"] == "granted"
    requeued = api.ok("GET", f"/v1/requests/{lease['request_id']}", world.token)
    assert requeued["attempt"] == 1 and requeued["state"] == "pending"
    preempted = [e for e in api.ok("GET", "/v1/events", params={"lease_id": lease["id"]}) if e["kind"] == "preempted"]
    assert "confirmed by backend local on gpu-a" in preempted[0]["message"]
    again = api.ok("POST", f"/v1/leases/{lease['id']}/stopped", json=body)
    assert again["state"] == "preempted", "confirming an ended lease changes nothing"


def test_a_stop_is_confirmed_only_for_a_preempting_lease(api: Api) -> None:
    world = api.world()
    request = api.submit(world.token, resources={"gpu": 1})
    body = {"backend": "local", "evidence": "gone"}
    refused = api.call("POST", f"/v1/leases/{request['lease_id']}/stopped", json=body)
    assert refused.status_code == 409 and refused.json()["field"] == "lease_id"
    assert _lease(api, world, request["lease_id"])["state"] == "granted"


def test_an_overdue_holder_silent_for_its_ttl_loses_the_lease(api: Api) -> None:
    world, prod, waiter, lease = _overdue_victim(api, lease_ttl_s=1.5)
    granted = api.wait_state(prod, waiter["id"], "pending")
    assert granted["state"] == "granted"
    ended = _lease(api, world, lease["id"])
    assert ended["state"] == "preempted"
    assert datetime.fromisoformat(ended["released_at"]) >= datetime.fromisoformat(lease["expires_at"]), (
        "the capacity returned only once the holder had been silent for its full TTL"
    )
    events = api.ok("GET", "/v1/events", params={"lease_id": lease["id"]})
    assert any(e["kind"] == "preempted" and "silent" in e["message"] for e in events)

"""A grant or a preemption notice decided by one replica's reconciler reaches long-polls on another
replica at once, through NOTIFY: the single-lease long-poll (``GET /v1/requests/{id}/wait``) and the
many-lease watch (``POST /v1/requests/watch``), which after its first read re-reads only the requests
it heard changed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import pg
from tests.server.servers import ServerProcess, start_server, wait_ready

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ADMIN = "rp_watch_replicas_admin"
HEARD_WITHIN_S = 10.0
"""Far below the long-polls' 60 s timeout, far above a notification's milliseconds on a loaded host."""


@pytest.fixture
def leader_and_follower(tmp_path: Path) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    reason = pg.unreachable_reason()
    if reason:
        pytest.skip(reason)
    with pg.scratch_database("respools_test_watch_replicas") as url:
        # No periodic recheck within the test: only a notification can answer the long-polls in time.
        started = [start_server(url, ADMIN, tmp_path, RESPOOLS_RECHECK_S="600") for _ in range(2)]
        try:
            for server in started:
                wait_ready(server)
            deadline = time.monotonic() + 30
            while sorted(str(s.role()) for s in started) != ["follower", "leader"]:
                assert time.monotonic() < deadline, "no replica became the leader"
                time.sleep(0.1)
            leader, follower = sorted(started, key=lambda s: s.role() != "leader")
            with _client(leader) as first, _client(follower) as second:
                yield first, second
        finally:
            for server in started:
                server.stop()


def _client(server: ServerProcess) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=90, headers={"Authorization": f"Bearer {ADMIN}"})


def _ok(response: httpx.Response) -> Any:
    assert response.status_code < 300, (response.status_code, response.text)
    return response.json()


def _until_waiting(server: httpx.Client, long_polls: int) -> None:
    """Until ``long_polls`` long-polls wait on ``server`` (registered for news: what happens from here on
    reaches them as news, not in their first read)."""
    deadline = time.monotonic() + 30
    while f"respools_long_polls {long_polls:.1f}" not in server.get("/metrics").text:
        assert time.monotonic() < deadline, "the long-polls never reached the follower"
        time.sleep(0.02)


def _heard(poll: Future[Any], started: float) -> Any:
    answer = poll.result(timeout=90)
    assert time.monotonic() - started < HEARD_WITHIN_S, "answered at the timeout, not on the news"
    return answer


def test_the_leaders_grants_and_notices_reach_long_polls_on_a_follower(
    leader_and_follower: tuple[httpx.Client, httpx.Client],
) -> None:
    leader, follower = leader_and_follower
    _ok(leader.put("/v1/pools/one", json={"name": "one", "capacity": {"gpu": 1}, "preemption_grace_s": 600}))
    tokens = {}
    for subject, policy in {
        "sandbox": {"reserved": {"gpu": 0}, "limit": {"gpu": 1}, "priority": 10},
        "prod": {"reserved": {"gpu": 1}, "priority": 100},
    }.items():
        _ok(leader.put(f"/v1/subjects/{subject}", json={"name": subject}))
        _ok(leader.post("/v1/policies", json={"subject": subject, "pool": "one"} | policy))
        tokens[subject] = _ok(leader.post("/v1/tokens", json={"role": "subject", "subject": subject}))["token"]
    as_sandbox = {"Authorization": f"Bearer {tokens['sandbox']}"}
    as_prod = {"Authorization": f"Bearer {tokens['prod']}"}

    held = _ok(
        leader.post("/v1/requests?wait=20", json={"resources": {"gpu": 1}, "preemptible": True}, headers=as_sandbox)
    )
    assert held["state"] == "granted"
    _ok(leader.post(f"/v1/leases/{held['lease_id']}/heartbeat", headers=as_sandbox))

    with ThreadPoolExecutor(max_workers=2) as pool:
        single, watched = _both_long_polls(pool, follower, held["id"], "active", as_sandbox)
        started = time.monotonic()
        waiting = _ok(leader.post("/v1/requests", json={"resources": {"gpu": 1}}, headers=as_prod))
        assert waiting["state"] == "pending"
        assert _heard(single, started)["state"] == "preempting"
        assert [(r["id"], r["state"]) for r in _heard(watched, started)["requests"]] == [(held["id"], "preempting")]

        single, watched = _both_long_polls(pool, follower, waiting["id"], "pending", as_prod)
        started = time.monotonic()
        _ok(leader.post(f"/v1/leases/{held['lease_id']}/release", headers=as_sandbox))  # the leader grants prod
        granted = _heard(single, started)
        assert granted["state"] == "granted" and granted["lease_id"]
        (watched_grant,) = _heard(watched, started)["requests"]
        assert (watched_grant["state"], watched_grant["lease_id"]) == ("granted", granted["lease_id"])


def _both_long_polls(
    pool: ThreadPoolExecutor, server: httpx.Client, request_id: str, state: str, headers: dict[str, str]
) -> tuple[Future[Any], Future[Any]]:
    """A single-lease long-poll and a many-request watch on ``request_id`` leaving ``state``, both waiting
    on ``server`` when this returns."""
    single = pool.submit(
        lambda: _ok(server.get(f"/v1/requests/{request_id}/wait?state={state}&timeout=60", headers=headers))
    )
    body = {"requests": {request_id: state}, "timeout": 60}
    watched = pool.submit(lambda: _ok(server.post("/v1/requests/watch", json=body, headers=headers)))
    _until_waiting(server, 2)
    return single, watched

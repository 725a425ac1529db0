"""Holders of many leases: one batch heartbeat for all of them and one watch long-poll for their
requests, each item answered as its own call would be, bad input refused with a 4xx naming the field."""

from __future__ import annotations

import threading
import time
from typing import Any

import sqlalchemy as sa

from respools.model import MAX_BATCH_IDS
from respools.server.db.statements import REQUESTS_BY_IDS
from respools.server.services import Services
from tests.server.conftest import Api


def _held(api: Api, count: int) -> tuple[str, list[dict[str, Any]]]:
    world = api.world(capacity={"gpu": max(8, count + 1)})
    granted = [api.submit(world.token, resources={"gpu": 1}) for _ in range(count)]
    assert all(r["state"] == "granted" for r in granted)
    return world.token, granted


def test_a_batch_heartbeat_renews_each_lease_and_reports_each_refusal(api: Api) -> None:
    token, granted = _held(api, 3)
    ids = [r["lease_id"] for r in granted]
    api.ok("POST", f"/v1/leases/{ids[2]}/release", token)
    other = api.world()
    foreign = api.submit(other.token, resources={"gpu": 1})["lease_id"]

    answer = api.ok("POST", "/v1/leases/heartbeat", token, json={"lease_ids": [*ids, "lse_missing", foreign]})
    assert sorted(lease["id"] for lease in answer["leases"]) == sorted(ids[:2])
    assert all(lease["state"] == "active" for lease in answer["leases"]), "the first heartbeat starts each"
    errors = {e["id"]: e["status"] for e in answer["errors"]}
    assert errors == {ids[2]: 409, "lse_missing": 404, foreign: 403}

    api.ok("POST", f"/v1/leases/{ids[0]}/preempt", json={"grace_s": 600})
    again = api.ok("POST", "/v1/leases/heartbeat", token, json={"lease_ids": ids[:2]})
    assert {lease["id"]: lease["state"] for lease in again["leases"]} == {ids[0]: "preempting", ids[1]: "active"}


def test_batch_bodies_are_bounded_and_refused_naming_the_field(api: Api) -> None:
    token, _ = _held(api, 1)
    too_many = api.call("POST", "/v1/leases/heartbeat", token, json={"lease_ids": ["x"] * (MAX_BATCH_IDS + 1)})
    assert too_many.status_code == 422 and too_many.json()["field"] == "lease_ids"
    empty = api.call("POST", "/v1/leases/heartbeat", token, json={"lease_ids": []})
    assert empty.status_code == 422 and empty.json()["field"] == "lease_ids"
    watched = {f"req_{i}": "active" for i in range(MAX_BATCH_IDS + 1)}
    watch = api.call("POST", "/v1/requests/watch", token, json={"requests": watched, "timeout": 1})
    assert watch.status_code == 422 and watch.json()["field"] == "requests"
    state = api.call("POST", "/v1/requests/watch", token, json={"requests": {"req_1": "sleeping"}})
    assert state.status_code == 422 and state.json()["field"].startswith("requests")
    long = api.call("POST", "/v1/requests/watch", token, json={"requests": {"req_1": "active"}, "timeout": 10**6})
    assert long.status_code == 422 and long.json()["field"] == "timeout"


def test_one_watch_hears_a_notice_on_any_of_its_requests_at_once(api: Api) -> None:
    token, granted = _held(api, 3)
    api.ok("POST", "/v1/leases/heartbeat", token, json={"lease_ids": [r["lease_id"] for r in granted]})
    seen = {r["id"]: "active" for r in granted}
    quiet = api.ok("POST", "/v1/requests/watch", token, json={"requests": seen, "timeout": 0.2})
    assert quiet == {"requests": [], "errors": []}, "nothing changed: answered after the timeout"

    victim = granted[1]
    timer = threading.Timer(0.3, lambda: api.ok("POST", f"/v1/leases/{victim['lease_id']}/preempt", json={}))
    started = time.monotonic()
    timer.start()
    answer = api.ok("POST", "/v1/requests/watch", token, json={"requests": seen, "timeout": 20})
    timer.join()
    assert time.monotonic() - started < 10, "answered on the notice, not at the timeout"
    assert [(r["id"], r["state"]) for r in answer["requests"]] == [(victim["id"], "preempting")]

    unknown = api.ok("POST", "/v1/requests/watch", token, json={"requests": {"req_missing": "active"}})
    assert unknown["errors"] == [{"id": "req_missing", "status": 404, "detail": "request 'req_missing' does not exist"}]


def test_a_watch_woken_by_one_change_reads_only_that_request(api: Api) -> None:
    """A wake costs what changed, not what is watched: after its first read of every request, the
    watch re-reads only the one whose notice woke it."""
    services: Services = api.client.app.state.services  # type: ignore[attr-defined]
    token, granted = _held(api, 4)
    api.ok("POST", "/v1/leases/heartbeat", token, json={"lease_ids": [r["lease_id"] for r in granted]})
    seen = {r["id"]: "active" for r in granted}
    reads: list[set[str]] = []

    def record(conn: Any, clause: Any, multiparams: Any, params: Any, options: Any) -> None:
        if clause is REQUESTS_BY_IDS:
            for bound in multiparams or [params]:
                ids = set(bound.get("k_ids", ())) & seen.keys()
                if ids:
                    reads.append(ids)

    sa.event.listen(services.db.read_engine, "before_execute", record)
    try:
        victim = granted[2]

        def preempt_once_watching() -> None:
            deadline = time.monotonic() + 20
            while set(seen) not in reads and time.monotonic() < deadline:
                time.sleep(0.01)
            api.ok("POST", f"/v1/leases/{victim['lease_id']}/preempt", json={})

        notice = threading.Thread(target=preempt_once_watching)
        notice.start()
        answer = api.ok("POST", "/v1/requests/watch", token, json={"requests": seen, "timeout": 20})
        notice.join()
    finally:
        sa.event.remove(services.db.read_engine, "before_execute", record)
    assert [(r["id"], r["state"]) for r in answer["requests"]] == [(victim["id"], "preempting")]
    assert reads[0] == set(seen), "the first read is of every watched request"
    assert reads[1:] and all(ids == {victim["id"]} for ids in reads[1:]), reads[1:]

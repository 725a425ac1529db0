"""A process holding many leases keeps them alive with batch heartbeats and hears each one's notice and
end through one watch, against a real server."""

from __future__ import annotations

import threading

from respools.client.keeper import LeaseKeeper
from respools.model import Request, RequestSpec, RequestState
from tests.client.conftest import WorldFactory, wait_for


def test_a_keeper_renews_its_leases_and_hears_notice_and_end_of_each(world: WorldFactory) -> None:
    w = world(capacity={"gpu": 4}, ttl_s=1.5)
    granted = [w.client.submit(RequestSpec(resources={"gpu": 1}), wait=10) for _ in range(3)]
    assert all(r.state == RequestState.GRANTED for r in granted)
    noticed: list[tuple[str, Request | None]] = []
    ended: list[tuple[str, Request | None]] = []
    lock = threading.Lock()

    def on_notice(lease_id: str, request: Request | None) -> None:
        with lock:
            noticed.append((lease_id, request))

    def on_end(lease_id: str, request: Request | None) -> None:
        with lock:
            ended.append((lease_id, request))

    keeper = LeaseKeeper(w.client, ttl_s=1.5, on_notice=on_notice, on_end=on_end)
    keeper.start()
    try:
        for request in granted:
            keeper.add(request)
        leases = [r.lease_id for r in granted]
        wait_for(lambda: all(w.client.get_lease(lid).state == RequestState.ACTIVE for lid in leases if lid))
        victim, cancelled, kept = granted
        assert victim.lease_id and cancelled.lease_id and kept.lease_id
        w.admin.post(f"/v1/leases/{victim.lease_id}/preempt", {"grace_s": 60})
        wait_for(lambda: noticed)
        assert noticed[0][0] == victim.lease_id
        w.client.cancel_request(cancelled.id)
        wait_for(lambda: ended)
        assert ended[0][0] == cancelled.lease_id
        threading.Event().wait(3 * 1.5)  # two TTLs: only the keeper's heartbeats keep the rest alive
        assert w.client.get_lease(kept.lease_id).state == RequestState.ACTIVE
        assert w.client.get_lease(victim.lease_id).state == RequestState.PREEMPTING
        assert len(noticed) == 1 and len(ended) == 1, "each piece of news once"
        keeper.remove(kept.lease_id)
        w.client.release(kept.lease_id)
    finally:
        keeper.stop()


def test_a_lease_of_a_shorter_ttl_quickens_the_keepers_pace(world: WorldFactory) -> None:
    """A holder that adopts leases already started (the Kubernetes controller after a restart) hands
    them over with their pool's TTL: a keeper made for 60 s leases renews a 1.5 s lease in time."""
    w = world(capacity={"gpu": 2}, ttl_s=1.5)
    request = w.client.submit(RequestSpec(resources={"gpu": 1}), wait=10)
    assert request.lease_id is not None
    started = w.client.heartbeat(request.lease_id)
    keeper = LeaseKeeper(w.client, ttl_s=60, on_notice=lambda *_: None, on_end=lambda *_: None)
    keeper.start()
    try:
        assert keeper.interval_s == 20
        keeper.add_lease(started, ttl_s=1.5)
        assert keeper.keeps(started.id) and not keeper.noticed(started.id)
        assert keeper.interval_s == 0.5
        threading.Event().wait(3 * 1.5)  # two TTLs: only the keeper's heartbeats keep it alive
        assert w.client.get_lease(started.id).state == RequestState.ACTIVE
        keeper.remove(started.id)
        assert not keeper.keeps(started.id)
        w.client.release(started.id)
    finally:
        keeper.stop()


def test_news_of_a_request_with_two_kept_leases_ends_the_older(world: WorldFactory) -> None:
    """A requeued request briefly has two kept leases (its holder adds the new grant before removing the
    old one): news of the request names the new lease, so the older is the one that ended. The keeper
    finds a request's leases by an index, not a scan of every lease held; this pins its answer."""
    w = world(capacity={"gpu": 2})
    first = w.client.submit(RequestSpec(resources={"gpu": 1}), wait=10)
    assert first.lease_id is not None
    ended: list[str] = []
    keeper = LeaseKeeper(w.client, ttl_s=60, on_notice=lambda *_: None, on_end=lambda lid, _: ended.append(lid))
    old = first.model_copy(update={"lease_id": "lse_old"})
    keeper.add(old)
    keeper.add(first)
    keeper._follow(first)  # the watch thread's handling of one answer, without its timing
    assert ended == ["lse_old"] and keeper.held == [first.lease_id]
    keeper.remove(first.lease_id)
    assert keeper.held == [] and not keeper._leases

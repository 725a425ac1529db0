"""Long-polls hear of changes on the event loop, and answer from a grant handed over with the change
when there is one (from any replica's reconciler, through NOTIFY) instead of reading the store again."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from respools.model import Request, RequestState
from respools.server.changes import MAX_PAYLOAD, Changes, Granted, decode, encode
from respools.server.codec import construct
from respools.server.watchers import RequestWatch

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def request(state: RequestState, lease_id: str | None = None) -> Request:
    values = {"id": "req_1", "subject": "a", "resources": {"gpu": 1000}, "submitted_at": NOW, "state": state}
    return construct(Request, values | {"lease_id": lease_id})


def test_a_grant_is_handed_over_and_a_change_without_one_withdraws_it() -> None:
    async def scenario() -> None:
        watch = RequestWatch(asyncio.get_running_loop())
        grant = Granted("lse_1", 0)
        with watch.watch("req_1") as changed:
            watch.on_changes(Changes(requests={"req_1", "req_2"}, granted={"req_1": grant, "req_2": grant}))
            await asyncio.wait_for(changed.wait(), 1)
            assert watch.granted("req_1") == grant
            assert watch.granted("req_2") is None, "only watched requests are kept"
            changed.clear()
            watch.on_changes(Changes(requests={"req_1"}))  # e.g. a heartbeat: its state must be read
            await asyncio.wait_for(changed.wait(), 1)
            assert watch.granted("req_1") is None
            watch.on_changes(Changes(requests={"req_1"}, granted={"req_1": grant}))
            await asyncio.wait_for(changed.wait(), 1)
            watch.on_changes(Changes(resync=True))
            await asyncio.sleep(0)
            assert watch.granted("req_1") is None, "a resync forgets what was handed over"
            watch.on_changes(Changes(requests={"req_1"}, granted={"req_1": grant}))
            await asyncio.sleep(0)
        assert watch.granted("req_1") is None, "nothing is kept once nobody watches"
        assert watch.waiting == 0

    _run_on_own_thread(scenario())


def test_a_recheck_wakes_only_the_long_polls_whose_request_left_the_state_they_wait_on() -> None:
    """The safety net for a lost notification: one read of every watched request per interval, and a
    long-poll is woken only when the state read is no longer the one it waits to leave."""

    async def scenario() -> None:
        watch = RequestWatch(asyncio.get_running_loop())
        with watch.watch("req_1") as first, watch.watch("req_2") as second, watch.watch("req_3") as unread:
            first.targets["req_1"] = second.targets["req_2"] = "active"
            mark = watch.mark()
            assert sorted(watch.watched()) == ["req_1", "req_2"], "a long-poll that has not read yet waits"
            assert watch.recheck({"req_1": "active", "req_2": "preempting"}, mark) == 1
            assert not first.is_set() and second.is_set() and not unread.is_set()
            gone = {"req_1": None, "req_2": "preempting"}
            assert watch.recheck(gone, mark) == 1, "a request gone from the store wakes its long-poll"
            assert first.is_set()
        assert watch.watched() == []

    _run_on_own_thread(scenario())


def test_a_recheck_judges_only_what_its_read_saw() -> None:
    """Long-polls come and go while a recheck reads: one registered after the read began, or waiting on
    a request the read did not ask for, read its request itself and is left alone. Judged by the older
    read, ten thousand holders' turnover woke hundreds of long-polls per recheck for nothing."""

    async def scenario() -> None:
        watch = RequestWatch(asyncio.get_running_loop())
        with watch.watch("req_1") as before:
            before.targets["req_1"] = "granted"
            mark = watch.mark()
            asked = watch.watched()
            with watch.watch("req_1") as after, watch.watch("req_2") as unasked:
                after.targets["req_1"] = "active"  # it read the request after the recheck's read
                unasked.targets["req_2"] = "active"
                states = {"req_1": "granted"}
                assert asked == ["req_1"]
                assert watch.recheck(states, mark) == 0
                assert not (before.is_set() or after.is_set() or unasked.is_set())
                assert watch.recheck({"req_1": "active"}, mark) == 1, "the one registered before is judged"
                assert before.is_set() and not after.is_set()

    _run_on_own_thread(scenario())


def test_a_grant_answers_only_for_the_pending_attempt_it_granted() -> None:
    pending = request(RequestState.PENDING)
    granted = Granted("lse_1", 0).applied_to(pending.model_copy(update={"wait_reason": "capacity"}))
    assert granted == request(RequestState.GRANTED, "lse_1")
    assert Granted("lse_1", 1).applied_to(pending) is None, "a grant of a later attempt: read the request"
    assert Granted("lse_1", 0).applied_to(request(RequestState.ACTIVE, "lse_0")) is None


def _run_on_own_thread(scenario: Coroutine[None, None, None]) -> None:
    """``asyncio.run`` on a thread of its own: the dashboard tests' session-wide Playwright keeps an event
    loop running on the main thread, where ``asyncio.run`` refuses to start another."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, scenario).result(timeout=30)


def test_merging_changes_drops_a_grant_that_a_later_change_made_stale() -> None:
    grant = Granted("lse_1", 0)
    merged = Changes(requests={"req_1"}, granted={"req_1": grant})
    merged.merge(Changes(requests={"req_1"}))
    assert merged.granted == {} and merged.requests == {"req_1"}
    merged.merge(Changes(requests={"req_1"}, granted={"req_1": grant}))
    assert merged.granted == {"req_1": grant}


def test_changes_travel_to_other_replicas_with_their_grants() -> None:
    ids = {f"req_{i:032x}" for i in range(300)}
    granted = {request_id: Granted(f"lse_{i:032x}", i % 3) for i, request_id in enumerate(sorted(ids)) if i % 2}
    sent = Changes(requests=ids, wake=True, config={"tokens"}, granted=granted)
    payloads = encode(sent, origin="me")
    assert len(payloads) > 1 and all(len(p) < MAX_PAYLOAD for p in payloads)
    heard = Changes()
    for payload in payloads:
        origin, changes = decode(payload)
        assert origin == "me" and changes.wake and changes.config == {"tokens"}
        heard.merge(changes)
    assert heard.requests == ids
    assert heard.granted == granted


def test_a_replica_of_the_previous_version_still_reads_every_id() -> None:
    sent = Changes(requests={"req_1", "req_2"}, granted={"req_2": Granted("lse_2", 0)})
    (payload,) = encode(sent, origin="me")
    ids = payload.split("|", 3)[3]  # how the previous version decoded a payload
    assert {"req_1", "req_2"} <= set(ids.split(","))


def test_a_payload_of_an_older_replica_or_a_mangled_grant_means_read_the_request() -> None:
    origin, changes = decode("them|w||req_1,req_2")  # no grants field: what older versions send
    assert (origin, changes.requests, changes.granted, changes.resync) == ("them", {"req_1", "req_2"}, {}, False)
    _, changes = decode("them|||req_1,req_2,|req_1:lse_1:x,req_2:lse_2:0,req_3:lse_3:0")
    assert changes.granted == {"req_2": Granted("lse_2", 0)}, "only well-formed grants of announced requests"
    assert decode("garbage")[1].resync


def test_a_watch_of_many_requests_learns_which_changed_and_a_resync_means_all() -> None:
    async def scenario() -> None:
        watch = RequestWatch(asyncio.get_running_loop())
        with watch.watch_many(["req_1", "req_2", "req_3"]) as changed:
            changed.targets.update({"req_1": "active", "req_2": "active", "req_3": "active"})
            watch.on_changes(Changes(requests={"req_2", "req_9"}))
            await asyncio.wait_for(changed.wait(), 1)
            assert changed.take_changed() == {"req_2"} and not changed.is_set()
            mark = watch.mark()  # after the watch registered: the reads below may judge it
            assert watch.recheck({"req_1": "active", "req_2": "active", "req_3": "active"}, mark) == 0
            assert changed.take_changed() == set(), "a recheck that found nothing marks nothing"
            watch.on_changes(Changes(requests={"req_1"}))
            await asyncio.wait_for(changed.wait(), 1)
            assert watch.recheck({"req_1": "preempting", "req_2": "active", "req_3": "ended"}, mark) == 0
            assert changed.take_changed() == {"req_1", "req_3"}, "a lost notice is marked even on a woken watch"
            watch.on_changes(Changes(resync=True))
            await asyncio.wait_for(changed.wait(), 1)
            assert changed.take_changed() is None, "after a resync every request is read again"
            assert changed.take_changed() == set()

    _run_on_own_thread(scenario())

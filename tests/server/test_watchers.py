"""Long-polls hear of changes on the event loop, and answer from a state handed over with the change
when there is one (a grant by this process's reconciler) instead of reading the store again."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from respools.model import Request, RequestState
from respools.server.changes import Changes
from respools.server.codec import construct
from respools.server.watchers import RequestWatch

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def request(state: RequestState, lease_id: str | None = None) -> Request:
    values = {"id": "req_1", "subject": "a", "resources": {"gpu": 1000}, "submitted_at": NOW, "state": state}
    return construct(Request, values | {"lease_id": lease_id})


def test_a_change_with_its_state_hands_it_over_and_one_without_withdraws_it() -> None:
    async def scenario() -> None:
        watch = RequestWatch(asyncio.get_running_loop())
        granted = request(RequestState.GRANTED, "lse_1")
        with watch.watch("req_1") as changed:
            watch.on_changes(Changes(requests={"req_1", "req_2"}, settled={"req_1": granted}))
            await asyncio.wait_for(changed.wait(), 1)
            assert watch.settled("req_1") == granted
            assert watch.settled("req_2") is None, "only watched requests are kept"
            changed.clear()
            watch.on_changes(Changes(requests={"req_1"}))  # e.g. a heartbeat: its state must be read
            await asyncio.wait_for(changed.wait(), 1)
            assert watch.settled("req_1") is None
            watch.on_changes(Changes(requests={"req_1"}, settled={"req_1": granted}))
            await asyncio.wait_for(changed.wait(), 1)
            watch.on_changes(Changes(resync=True))
            await asyncio.sleep(0)
            assert watch.settled("req_1") is None, "a resync forgets what was handed over"
            watch.on_changes(Changes(requests={"req_1"}, settled={"req_1": granted}))
            await asyncio.sleep(0)
        assert watch.settled("req_1") is None, "nothing is kept once nobody watches"
        assert watch.waiting == 0

    _run_on_own_thread(scenario())


def _run_on_own_thread(scenario: Coroutine[None, None, None]) -> None:
    """``asyncio.run`` on a thread of its own: the dashboard tests' session-wide Playwright keeps an event
    loop running on the main thread, where ``asyncio.run`` refuses to start another."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, scenario).result(timeout=30)


def test_merging_changes_drops_a_state_that_a_later_change_made_stale() -> None:
    granted = request(RequestState.GRANTED, "lse_1")
    merged = Changes(requests={"req_1"}, settled={"req_1": granted})
    merged.merge(Changes(requests={"req_1"}))
    assert merged.settled == {} and merged.requests == {"req_1"}
    merged.merge(Changes(requests={"req_1"}, settled={"req_1": granted}))
    assert merged.settled == {"req_1": granted}

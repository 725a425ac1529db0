"""The change feed behind the live streams: it wakes on the change bus (from any thread) and, while a
dashboard is open, on queue decisions the reconciler records without announcing them."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from respools.server.changes import Changes
from respools.server.dashboard.feed import ChangeFeed


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run an async test on its own loop in its own thread: Playwright's sync API keeps a loop running
    in the main thread for the browser tests of the same session."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, test()).result(timeout=30)


def test_a_commit_announced_on_another_thread_wakes_the_streams() -> None:
    run(commit_wakes_streams)


def test_a_quiet_queue_change_wakes_the_streams_only_while_one_is_open() -> None:
    run(quiet_queue_change_wakes_streams)


async def commit_wakes_streams() -> None:
    feed = ChangeFeed(asyncio.get_running_loop(), lambda: "same", poll_s=0.01)
    seen = feed.version
    assert await feed.wait(seen, 0.05) == seen  # nothing happened: the wait times out unchanged
    threading.Thread(target=feed.on_changes, args=(Changes(events=True),)).start()
    assert await feed.wait(seen, 2.0) == seen + 1


async def quiet_queue_change_wakes_streams() -> None:
    fingerprint = {"value": "a"}
    polls = 0

    def read() -> str:
        nonlocal polls
        polls += 1
        return fingerprint["value"]

    feed = ChangeFeed(asyncio.get_running_loop(), read, poll_s=0.01)
    with feed.watching():
        await asyncio.sleep(0.05)
        seen = feed.version
        assert polls > 0 and seen == 0  # polling, but the queue did not move
        fingerprint["value"] = "b"
        assert await feed.wait(seen, 2.0) == seen + 1
    await asyncio.sleep(0.05)
    stopped_at = polls
    await asyncio.sleep(0.05)
    assert polls == stopped_at, "the poller kept reading the store with no dashboard open"
    await feed.close()

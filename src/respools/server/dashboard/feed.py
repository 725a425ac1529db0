"""What wakes the dashboards' live streams.

Every committed change the process hears of (its own writes, and other replicas' through the
PostgreSQL listener) bumps a version; each open stream tells its page when the version moved, and the
page fetches its sections again. One thing changes without an announcement: the reconciler records
queue positions and wait reasons quietly (announcing them would wake every long-poll on every cycle),
so while at least one dashboard is open, a poller compares a digest of the queue every
``queue_poll_s`` and bumps the version when it moved."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from starlette.concurrency import run_in_threadpool

from respools.server.changes import Changes

log = logging.getLogger(__name__)


class ChangeFeed:
    def __init__(self, loop: asyncio.AbstractEventLoop, fingerprint: Callable[[], str], poll_s: float) -> None:
        self._loop = loop
        self._fingerprint = fingerprint
        self._poll_s = poll_s
        self._changed = asyncio.Event()
        self._watchers = 0
        self._poller: asyncio.Task[None] | None = None
        self.version = 0

    def on_changes(self, changes: Changes) -> None:
        """Change-bus subscriber (any thread)."""
        self._loop.call_soon_threadsafe(self.bump)

    def bump(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, seen: int, timeout: float) -> int:
        """The version once it differs from ``seen``, or the same after ``timeout`` seconds."""
        if self.version != seen:
            return self.version
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)
        return self.version

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Held by each open stream; the queue poller runs while any is held."""
        self._watchers += 1
        if self._poller is None or self._poller.done():
            self._poller = self._loop.create_task(self._poll_queue())
        try:
            yield
        finally:
            self._watchers -= 1

    @property
    def watchers(self) -> int:
        return self._watchers

    async def _poll_queue(self) -> None:
        last: str | None = None
        while self._watchers > 0:
            current: str | None
            try:
                current = await run_in_threadpool(self._fingerprint)
            except Exception:
                log.warning("dashboard queue poll failed", exc_info=True)
                current = last
            if last is not None and current != last:
                self.bump()
            last = current
            await asyncio.sleep(self._poll_s)

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller

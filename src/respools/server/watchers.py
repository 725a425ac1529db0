"""Long-polls and event streams wait here, on the event loop, for news from the :class:`ChangeBus`
(which may publish from any thread)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from respools.model import Request
from respools.server.changes import Changes


class RequestWatch:
    """Wakes the long-polls of requests whose state changed, handing them the new state when the
    change came with it (:attr:`Changes.settled`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._settled: dict[str, Request] = {}

    def on_changes(self, changes: Changes) -> None:
        if changes.resync:
            self._loop.call_soon_threadsafe(self._fire_all)
        elif changes.requests:
            ids = frozenset(changes.requests)
            self._loop.call_soon_threadsafe(self._fire, ids, dict(changes.settled))

    def _fire(self, ids: frozenset[str], settled: dict[str, Request]) -> None:
        waiters = self._waiters
        watched = [i for i in ids if i in waiters] if len(ids) < len(waiters) else [i for i in waiters if i in ids]
        for request_id in watched:
            state = settled.get(request_id)
            if state is not None:
                self._settled[request_id] = state
            else:
                self._settled.pop(request_id, None)
            for event in waiters[request_id]:
                event.set()

    def _fire_all(self) -> None:
        self._settled.clear()
        for events in self._waiters.values():
            for event in events:
                event.set()

    def settled(self, request_id: str) -> Request | None:
        """The state the latest change of a watched request came with, if it came with one."""
        return self._settled.get(request_id)

    @contextmanager
    def watch(self, request_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever ``request_id`` changes; register *before* reading the request, so that
        no change can slip between the read and the wait."""
        event = asyncio.Event()
        self._waiters.setdefault(request_id, set()).add(event)
        try:
            yield event
        finally:
            waiters = self._waiters.get(request_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[request_id]
                    self._settled.pop(request_id, None)

    @property
    def waiting(self) -> int:
        return sum(len(v) for v in self._waiters.values())


class EventFeed:
    """Wakes event streams when the log grows."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    def on_changes(self, changes: Changes) -> None:
        if changes.events or changes.resync:
            self._loop.call_soon_threadsafe(self._notify)

    def _notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> bool:
        """True when the log grew within ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return False
        return True

"""Long-polls and event streams wait here, on the event loop, for news from the :class:`ChangeBus`
(which may publish from any thread)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from respools.server.changes import Changes


class RequestWatch:
    """Wakes the long-polls of requests whose state changed."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[str, set[asyncio.Event]] = {}

    def on_changes(self, changes: Changes) -> None:
        if changes.resync:
            self._loop.call_soon_threadsafe(self._fire_all)
        elif changes.requests:
            ids = frozenset(changes.requests)
            self._loop.call_soon_threadsafe(self._fire, ids)

    def _fire(self, ids: frozenset[str]) -> None:
        waiters = self._waiters
        if len(ids) < len(waiters):
            for request_id in ids:
                for event in waiters.get(request_id, ()):
                    event.set()
        else:
            for request_id, events in waiters.items():
                if request_id in ids:
                    for event in events:
                        event.set()

    def _fire_all(self) -> None:
        for events in self._waiters.values():
            for event in events:
                event.set()

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

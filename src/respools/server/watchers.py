"""Long-polls and event streams wait here, on the event loop, for news from the :class:`ChangeBus`
(which may publish from any thread)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from respools.server.changes import Changes, Granted


class RequestWatch:
    """Wakes the long-polls of requests whose state changed, handing them the grant when the change
    was one (:attr:`Changes.granted`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._granted: dict[str, Granted] = {}

    def on_changes(self, changes: Changes) -> None:
        if changes.resync:
            self._loop.call_soon_threadsafe(self._fire_all)
        elif changes.requests:
            ids = frozenset(changes.requests)
            self._loop.call_soon_threadsafe(self._fire, ids, dict(changes.granted))

    def _fire(self, ids: frozenset[str], granted: dict[str, Granted]) -> None:
        waiters = self._waiters
        watched = [i for i in ids if i in waiters] if len(ids) < len(waiters) else [i for i in waiters if i in ids]
        for request_id in watched:
            grant = granted.get(request_id)
            if grant is not None:
                self._granted[request_id] = grant
            else:
                self._granted.pop(request_id, None)
            for event in waiters[request_id]:
                event.set()

    def _fire_all(self) -> None:
        self._granted.clear()
        for events in self._waiters.values():
            for event in events:
                event.set()

    def granted(self, request_id: str) -> Granted | None:
        """The grant the latest change of a watched request was, if it was one."""
        return self._granted.get(request_id)

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
                    self._granted.pop(request_id, None)

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

"""Long-polls and event streams wait here, on the event loop, for news from the :class:`ChangeBus`
(which may publish from any thread)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from respools.server.changes import Changes, Granted


class Waiter(asyncio.Event):
    """A long-poll's event, the state it waits for each of its requests to leave (once it has read
    them), and which of them were said to change since it last looked: a watch of many requests re-reads
    only those, so that a wake costs what changed rather than what is watched."""

    def __init__(self, serial: int = 0) -> None:
        super().__init__()
        self.serial = serial
        """The order of its registration among the process's long-polls (see :meth:`RequestWatch.mark`)."""
        self.targets: dict[str, str] = {}
        self._changed: set[str] = set()
        self._everything = False

    def changed(self, request_id: str) -> None:
        self._changed.add(request_id)
        self.set()

    def everything_changed(self) -> None:
        """News may have been lost (a resync): every watched request must be read again."""
        self._everything = True
        self.set()

    def take_changed(self) -> set[str] | None:
        """Clear the event; the requests said to change since the last call, or ``None`` when any of
        them may have (read them all)."""
        self.clear()
        changed, everything = self._changed, self._everything
        self._changed, self._everything = set(), False
        return None if everything else changed


class RequestWatch:
    """Wakes the long-polls of requests whose state changed, handing them the grant when the change
    was one (:attr:`Changes.granted`).

    News comes from the change bus: this process's commits, and the other replicas' through NOTIFY. A
    notification can still be lost (a replica killed between its commit and its NOTIFY, a notifier that
    failed to send); :meth:`recheck` is the safety net, one read of every watched request's state per
    interval for the whole process rather than one per long-poll."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[str, set[Waiter]] = {}
        self._granted: dict[str, Granted] = {}
        self.long_polls = 0
        """Long-polls and watches registered now (one each, however many requests a watch names)."""
        self._registered = 0

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
                event.changed(request_id)

    def _fire_all(self) -> None:
        self._granted.clear()
        for events in self._waiters.values():
            for event in events:
                event.everything_changed()

    def granted(self, request_id: str) -> Granted | None:
        """The grant the latest change of a watched request was, if it was one."""
        return self._granted.get(request_id)

    def watched(self) -> list[str]:
        """The requests some long-poll waits on with a known target state."""
        return [i for i, waiters in self._waiters.items() if any(i in w.targets for w in waiters)]

    def mark(self) -> int:
        """Taken before a recheck's read: the long-polls registered until now are the ones it may judge."""
        return self._registered

    def recheck(self, states: Mapping[str, str | None], mark: int) -> int:
        """Wake the long-polls whose request's state, as read after ``mark`` (``None``: deleted), is no
        longer the one they wait to leave. Returns how many were woken: each was owed a notification.

        Only what the read can speak for is judged: requests it read, and long-polls registered before
        it began. Every other long-poll read its request itself after registering, and at ten thousand
        holders hundreds of them come and go while a read runs: judged by a read that never saw them
        (or saw them before their own read), they were woken for nothing, and every false wake is one
        more call, which made the next read slower still."""
        woken = 0
        for request_id, state in states.items():
            for waiter in self._waiters.get(request_id, ()):
                target = waiter.targets.get(request_id)
                if target is not None and waiter.serial < mark and state != target:
                    woken += not waiter.is_set()
                    waiter.changed(request_id)  # even when already woken: by the news of another request
        return woken

    @contextmanager
    def watch(self, request_id: str) -> Iterator[Waiter]:
        """An event set whenever ``request_id`` changes; register *before* reading the request, so that
        no change can slip between the read and the wait."""
        with self.watch_many([request_id]) as event:
            yield event

    @contextmanager
    def watch_many(self, request_ids: list[str]) -> Iterator[Waiter]:
        """One event set whenever any of ``request_ids`` changes (a holder of many leases' watch)."""
        event = Waiter(self._registered)
        self._registered += 1
        for request_id in request_ids:
            self._waiters.setdefault(request_id, set()).add(event)
        self.long_polls += 1
        try:
            yield event
        finally:
            self.long_polls -= 1
            for request_id in request_ids:
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

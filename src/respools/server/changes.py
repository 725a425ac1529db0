"""What a committed transaction changed, and how that news travels.

Inside one process a :class:`ChangeBus` fans changes out to the reconciler (wake up), to long-polls
waiting on a request, to event streams and to caches. Across replicas the same news rides on
PostgreSQL ``NOTIFY`` (see :mod:`respools.server.listener`); each message carries the sender's origin
so that a process does not hear its own changes twice.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from respools.model import Request

log = logging.getLogger(__name__)

CHANNEL = "respools"
MAX_PAYLOAD = 7800  # PostgreSQL refuses payloads of 8000 bytes or more
ORIGIN = uuid.uuid4().hex[:12]
"""Identifies this process in NOTIFY payloads."""


@dataclass(slots=True)
class Changes:
    """The news of one or more commits."""

    requests: set[str] = field(default_factory=set)
    """Requests whose state changed: their long-polls re-read them."""
    wake: bool = False
    """Something the scheduler must look at (a new request, freed capacity, new definitions)."""
    events: bool = False
    """Events were appended to the log."""
    config: set[str] = field(default_factory=set)
    """Cached topics to reload: ``definitions`` or ``tokens``."""
    resync: bool = False
    """Notifications may have been lost (listener reconnected): everyone re-reads."""
    settled: dict[str, Request] = field(default_factory=dict)
    """The committed state of some of ``requests`` (those a reconciler cycle granted), so that this
    process's long-polls answer without reading them again. Never sent to other replicas: theirs re-read."""

    def __bool__(self) -> bool:
        return bool(self.requests or self.wake or self.events or self.config or self.resync)

    def merge(self, other: Changes) -> None:
        for request_id in other.requests - other.settled.keys():
            self.settled.pop(request_id, None)  # changed again since: what was settled is stale
        self.settled.update(other.settled)
        self.requests |= other.requests
        self.wake |= other.wake
        self.events |= other.events
        self.config |= other.config
        self.resync |= other.resync


def encode(changes: Changes, origin: str = ORIGIN) -> list[str]:
    """NOTIFY payloads for ``changes``, each within PostgreSQL's size limit.

    Format: ``<origin>|<flags>|<topics>|<request ids>`` with flags from ``w`` (wake) and ``e`` (events),
    topics and ids comma-separated."""
    flags = ("w" if changes.wake else "") + ("e" if changes.events else "")
    head = f"{origin}|{flags}|{','.join(sorted(changes.config))}|"
    payloads: list[str] = []
    current: list[str] = []
    size = len(head)
    for request_id in sorted(changes.requests):
        if current and size + len(request_id) + 1 > MAX_PAYLOAD:
            payloads.append(head + ",".join(current))
            current, size = [], len(head)
        current.append(request_id)
        size += len(request_id) + 1
    payloads.append(head + ",".join(current))
    return payloads


def decode(payload: str) -> tuple[str, Changes]:
    """The origin and the changes of one payload; a malformed payload asks for a resync."""
    parts = payload.split("|", 3)
    if len(parts) != 4:
        return "", Changes(resync=True)
    origin, flags, topics, ids = parts
    return origin, Changes(
        requests={i for i in ids.split(",") if i},
        wake="w" in flags,
        events="e" in flags,
        config={t for t in topics.split(",") if t},
    )


Subscriber = Callable[[Changes], None]


class ChangeBus:
    """Synchronous in-process fan-out. Subscribers must be quick and must not raise; those that need
    the event loop hop onto it themselves (``call_soon_threadsafe``)."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            with self._lock:
                if subscriber in self._subscribers:
                    self._subscribers.remove(subscriber)

        return unsubscribe

    def publish(self, changes: Changes) -> None:
        if not changes:
            return
        with self._lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            try:
                subscriber(changes)
            except Exception:  # a broken subscriber must not break the writer that published
                log.exception("change subscriber failed")


def request_ids(ids: Iterable[str]) -> Changes:
    return Changes(requests=set(ids))

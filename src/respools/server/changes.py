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

from respools.model import Request, RequestState
from respools.server.codec import WAIT_CLEARED

log = logging.getLogger(__name__)

CHANNEL = "respools"
MAX_PAYLOAD = 7800  # PostgreSQL refuses payloads of 8000 bytes or more
ORIGIN = uuid.uuid4().hex[:12]
"""Identifies this process in NOTIFY payloads."""


@dataclass(frozen=True, slots=True)
class Granted:
    """A grant, as much of it as the long-poll of its pending request needs to answer without reading
    the request again."""

    lease_id: str
    attempt: int

    def applied_to(self, request: Request) -> Request | None:
        """``request`` as granted, when it is the pending attempt this grant is for; ``None`` otherwise
        (the caller's copy is older or newer than the grant: read the request)."""
        if request.state != RequestState.PENDING or request.attempt != self.attempt:
            return None
        granted = {"state": RequestState.GRANTED, "lease_id": self.lease_id, "reason": None, **WAIT_CLEARED}
        return request.model_copy(update=granted)


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
    granted: dict[str, Granted] = field(default_factory=dict)
    """Which of ``requests`` a reconciler cycle granted, and how: their long-polls answer from this
    instead of reading them again, in this process and, through NOTIFY, on the other replicas."""

    def __bool__(self) -> bool:
        return bool(self.requests or self.wake or self.events or self.config or self.resync)

    def merge(self, other: Changes) -> None:
        for request_id in other.requests - other.granted.keys():
            self.granted.pop(request_id, None)  # changed again since: the grant may be stale
        self.granted.update(other.granted)
        self.requests |= other.requests
        self.wake |= other.wake
        self.events |= other.events
        self.config |= other.config
        self.resync |= other.resync


def encode(changes: Changes, origin: str = ORIGIN) -> list[str]:
    """NOTIFY payloads for ``changes``, each within PostgreSQL's size limit.

    Format: ``<origin>|<flags>|<topics>|<request ids>`` with flags from ``w`` (wake) and ``e`` (events),
    topics and ids comma-separated; with grants, ``,|<grants>`` follows, each grant
    ``<request id>:<lease id>:<attempt>``. A granted request is also among the ids, and the ids end with a
    comma before the grants, so that a replica of the previous version (during a rolling upgrade), which
    reads everything after the third ``|`` as ids, still reads every id whole (the grants become ids of no
    request)."""
    flags = ("w" if changes.wake else "") + ("e" if changes.events else "")
    head = f"{origin}|{flags}|{','.join(sorted(changes.config))}|"
    payloads: list[str] = []
    ids: list[str] = []
    grants: list[str] = []
    size = len(head) + 2
    for request_id in sorted(changes.requests):
        grant = changes.granted.get(request_id)
        entry = "" if grant is None else f"{request_id}:{grant.lease_id}:{grant.attempt}"
        cost = len(request_id) + 1 + (len(entry) + 1 if entry else 0)
        if ids and size + cost > MAX_PAYLOAD:
            payloads.append(_payload(head, ids, grants))
            ids, grants, size = [], [], len(head) + 2
        ids.append(request_id)
        if entry:
            grants.append(entry)
        size += cost
    payloads.append(_payload(head, ids, grants))
    return payloads


def _payload(head: str, ids: list[str], grants: list[str]) -> str:
    if not grants:
        return head + ",".join(ids)
    return f"{head}{','.join(ids)},|{','.join(grants)}"


def decode(payload: str) -> tuple[str, Changes]:
    """The origin and the changes of one payload; a malformed payload asks for a resync. A payload
    without grants (from an older replica) is read as one whose requests must all be read again."""
    parts = payload.split("|", 4)
    if len(parts) not in (4, 5):
        return "", Changes(resync=True)
    origin, flags, topics, ids = parts[:4]
    granted: dict[str, Granted] = {}
    for entry in parts[4].split(",") if len(parts) == 5 else ():
        request_id, _, rest = entry.partition(":")
        lease_id, _, attempt = rest.partition(":")
        if lease_id and attempt.isdigit():  # anything else: that request is re-read, as without a grant
            granted[request_id] = Granted(lease_id, int(attempt))
    requests = {i for i in ids.split(",") if i}
    return origin, Changes(
        requests=requests,
        wake="w" in flags,
        events="e" in flags,
        config={t for t in topics.split(",") if t},
        granted={i: g for i, g in granted.items() if i in requests},
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

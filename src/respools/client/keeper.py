"""Many leases held by one process, kept alive and watched over two calls rather than one per lease.

A :class:`~respools.client.monitor.LeaseMonitor` per lease is a thread, a connection and a heartbeat
call per lease: fine for a step, not for a controller or a job runner that holds a lease per workload,
thousands at once. A :class:`LeaseKeeper` renews all of them with ``POST /v1/leases/heartbeat`` (up to
:data:`~respools.model.MAX_BATCH_IDS` per call) every third of the TTL, and watches all their requests
with ``POST /v1/requests/watch`` (one long-poll per thousand), the way etcd renews many leases over one
keep-alive stream. It reports each lease's notice and end through listeners, as the monitor does.

The Kubernetes controller keeps its workloads' leases with one keeper per process; the Vertex AI /
Databricks runners still run a monitor per lease today.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from respools.client.api import Client
from respools.client.errors import ApiError, ServerUnreachable
from respools.client.monitor import RETRY_PAUSE_S, heartbeat_interval
from respools.model import MAX_BATCH_IDS, Lease, Request, RequestState

log = logging.getLogger("respools.client")

WATCH_POLL_S = 10.0
"""Longest watch call: a lease added meanwhile is watched from the next call (its heartbeats report a
notice in the meantime)."""

KeeperNotice = Callable[[str, Request | None], None]
"""Called with the lease id under notice and its request as last seen (``None`` when the notice came
with a heartbeat)."""
KeeperEnd = Callable[[str, Request | None], None]
"""Called with the lease id that ended by the server's doing and its request as last seen, which says
why (``None`` when a heartbeat found it ended)."""

_HELD = (RequestState.GRANTED, RequestState.ACTIVE)


class LeaseKeeper:
    """Keeps the leases :meth:`add`-ed to it alive until they are :meth:`remove`-d or end."""

    def __init__(self, client: Client, *, ttl_s: float, on_notice: KeeperNotice, on_end: KeeperEnd) -> None:
        self._client = client
        self.interval_s = heartbeat_interval(ttl_s)
        self._on_notice = on_notice
        self._on_end = on_end
        self._lock = threading.Lock()
        self._requests: dict[str, str] = {}
        """Lease id → its request id."""
        self._leases: dict[str, list[str]] = {}
        """Request id → its kept leases, oldest first (a requeued request briefly has two): the news of a
        request finds its lease without a scan of every lease held."""
        self._seen: dict[str, RequestState] = {}
        """Request id → the state last seen (what the watch waits for it to leave)."""
        self._noticed: set[str] = set()
        self._stopping = threading.Event()
        self._kick = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- the holder's side -----------------------------------------------------------------------------

    def add(self, request: Request) -> None:
        """Keep ``request``'s lease alive from now on; its first heartbeat (which starts it) comes at once."""
        if request.lease_id is None:
            raise ValueError(f"request {request.id} holds no lease")
        with self._lock:
            self._keep(request.lease_id, request.id)
            self._seen[request.id] = request.state
            if request.state == RequestState.PREEMPTING:
                self._noticed.add(request.lease_id)
            watchers = self._watchers_needed()
        self._kick.set()
        self._start_watchers(watchers)

    def add_lease(self, lease: Lease, ttl_s: float) -> None:
        """Keep ``lease`` (of a pool whose TTL is ``ttl_s``) alive from now on, as just renewed (the answer
        to its heartbeat): its next heartbeat comes with the others'. A TTL shorter than the keeper's
        shortens the interval for all: a holder serving pools of several TTLs renews at the pace of the
        shortest."""
        with self._lock:
            self._keep(lease.id, lease.request_id)
            self._seen[lease.request_id] = lease.state
            if lease.state == RequestState.PREEMPTING:
                self._noticed.add(lease.id)
            sooner = heartbeat_interval(ttl_s) < self.interval_s
            if sooner:
                self.interval_s = heartbeat_interval(ttl_s)
            watchers = self._watchers_needed()
        if sooner:
            self._kick.set()  # the beat thread waits on the old interval
        self._start_watchers(watchers)

    def keeps(self, lease_id: str) -> bool:
        """Whether ``lease_id`` is kept alive here: added, and neither removed nor ended since."""
        with self._lock:
            return lease_id in self._requests

    def noticed(self, lease_id: str) -> bool:
        """Whether ``lease_id`` is under preemption notice, as far as this keeper heard."""
        with self._lock:
            return lease_id in self._noticed

    def remove(self, lease_id: str) -> None:
        """Stop keeping ``lease_id`` (call before releasing it, so the release is not reported as an end)."""
        with self._lock:
            request_id = self._requests.pop(lease_id, None)
            if request_id is not None:
                self._seen.pop(request_id, None)
                leases = self._leases[request_id]
                leases.remove(lease_id)
                if not leases:
                    del self._leases[request_id]
            self._noticed.discard(lease_id)

    def _keep(self, lease_id: str, request_id: str) -> None:
        """Record a kept lease (called under the lock); a lease belongs to one request for good."""
        if lease_id in self._requests:
            return
        self._requests[lease_id] = request_id
        self._leases.setdefault(request_id, []).append(lease_id)

    def _lease_of(self, request_id: str) -> str | None:
        """The oldest kept lease of ``request_id`` (called under the lock)."""
        leases = self._leases.get(request_id)
        return leases[0] if leases else None

    @property
    def held(self) -> list[str]:
        with self._lock:
            return list(self._requests)

    def start(self) -> None:
        beats = threading.Thread(target=self._beat_forever, name="respools-keeper-beats", daemon=True)
        self._threads.append(beats)
        beats.start()
        self._start_watchers(self._watchers_needed())

    def stop(self, timeout: float = 2.0) -> None:
        """Stop renewing and watching; the leases still held expire after their TTL unless released."""
        self._stopping.set()
        self._kick.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    # -- heartbeats --------------------------------------------------------------------------------------

    def _beat_forever(self) -> None:
        while not self._stopping.is_set():
            self._kick.clear()
            self.beat_once()
            self._kick.wait(self.interval_s)

    def beat_once(self) -> None:
        """Renew every lease held, in batches; a failed batch is retried after a pause."""
        ids = self.held
        for start in range(0, len(ids), MAX_BATCH_IDS):
            chunk = ids[start : start + MAX_BATCH_IDS]
            while not self._stopping.is_set():
                try:
                    outcomes = self._client.heartbeat_many(chunk)
                except (ServerUnreachable, ApiError) as exc:
                    log.warning("renewing %d leases failed (%s); retrying", len(chunk), exc)
                    self._stopping.wait(RETRY_PAUSE_S)
                    continue
                for lease in outcomes.leases:
                    if lease.state == RequestState.PREEMPTING:
                        self._notice(lease.id, None)
                for error in outcomes.errors:
                    if error.status in (404, 409):
                        self._ended(error.id, None)
                    else:
                        log.warning("lease %s: heartbeat refused (%s %s)", error.id, error.status, error.detail)
                break

    # -- the watch ---------------------------------------------------------------------------------------

    def _watchers_needed(self) -> int:
        return max(1, -(-len(self._seen) // MAX_BATCH_IDS))

    def _start_watchers(self, needed: int) -> None:
        if not self._threads:
            return  # not started yet: start() starts them
        with self._lock:
            missing = range(len(self._threads) - 1, needed)
            fresh = [
                threading.Thread(target=self._watch_forever, args=(i,), name=f"respools-keeper-watch-{i}", daemon=True)
                for i in missing
            ]
            self._threads.extend(fresh)
        for thread in fresh:
            thread.start()

    def _watch_forever(self, index: int) -> None:
        """Watch the ``index``-th thousand of the held requests (in id order) until stopped."""
        while not self._stopping.is_set():
            with self._lock:
                ids = sorted(self._seen)[index * MAX_BATCH_IDS : (index + 1) * MAX_BATCH_IDS]
                states = {i: self._seen[i] for i in ids}
            if not states:
                self._stopping.wait(RETRY_PAUSE_S)
                continue
            try:
                answer = self._client.watch_requests(states, timeout=WATCH_POLL_S)
            except (ServerUnreachable, ApiError) as exc:
                log.warning("watching %d requests failed (%s); retrying", len(states), exc)
                self._stopping.wait(RETRY_PAUSE_S)
                continue
            for request in answer.requests:
                self._follow(request)
            for error in answer.errors:
                self._forget_request(error.id)

    def _follow(self, request: Request) -> None:
        with self._lock:
            if request.id not in self._seen:
                return  # removed meanwhile
            self._seen[request.id] = request.state
            lease_id = self._lease_of(request.id)
        if lease_id is None:
            return
        if request.lease_id == lease_id and request.state in _HELD:
            return
        if request.lease_id == lease_id and request.state == RequestState.PREEMPTING:
            self._notice(lease_id, request)
            return
        self._ended(lease_id, request)

    def _forget_request(self, request_id: str) -> None:
        with self._lock:
            lease_id = self._lease_of(request_id)
        if lease_id is not None:
            self._ended(lease_id, None)

    # -- news --------------------------------------------------------------------------------------------

    def _notice(self, lease_id: str, request: Request | None) -> None:
        with self._lock:
            if lease_id not in self._requests or lease_id in self._noticed or self._stopping.is_set():
                return
            self._noticed.add(lease_id)
            if request is not None:
                self._seen[request.id] = request.state
            else:
                self._seen[self._requests[lease_id]] = RequestState.PREEMPTING
        self._on_notice(lease_id, request)

    def _ended(self, lease_id: str, request: Request | None) -> None:
        with self._lock:
            if lease_id not in self._requests or self._stopping.is_set():
                return
        self.remove(lease_id)
        self._on_end(lease_id, request)

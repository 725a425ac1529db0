"""The background thread that keeps a lease alive and listens for its fate.

It heartbeats every third of the pool's lease TTL (so two lost heartbeats in a row still leave the lease
alive) and, between heartbeats, long-polls the lease's request: the server answers that poll the moment the
reconciler commits a preemption, which is what gets notice to the step within milliseconds rather than at
the next heartbeat. When the server is unreachable it keeps trying; the lease survives as long as the
server comes back within the TTL.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from respools.client.api import Client
from respools.client.errors import ApiError, ServerUnreachable
from respools.model import Lease, Request, RequestState

log = logging.getLogger("respools.client")

MIN_HEARTBEAT_S = 0.05
MAX_HEARTBEAT_S = 20.0
RETRY_PAUSE_S = 0.5
"""Pause after a failed call before the next, so a down server is not hammered from every lease."""
JOIN_S = 2.0
BEAT_JITTER = 0.1
"""Each interval between heartbeats is shortened by a random part of up to this share of it (never
lengthened: the TTL's margin stays whole)."""

NoticeListener = Callable[[Lease, str | None], None]
"""Called with the lease under notice and the scheduler's message."""
EndListener = Callable[[Lease, Request | None], None]
"""Called with the lease once it ended by the server's doing (expired, revoked, cancelled…), and its
request as last seen, which says why."""


def heartbeat_interval(ttl_s: float) -> float:
    return min(MAX_HEARTBEAT_S, max(MIN_HEARTBEAT_S, ttl_s / 3))


class BeatSchedule:
    """When a holder's next heartbeat is due.

    Counted from when the last one was *due*, not from when its answer came: a server stall (a full
    collection, a busy host) delays every heartbeat in flight, and holders that each waited an interval
    from their late answers would from then on beat together, in bursts that make the next stall. Kept to
    its own phase, a holder held up once is back on it at its next beat; one more than an interval late
    (the server was down) starts afresh from now. Each interval is also shortened by up to
    :data:`BEAT_JITTER` of it, so holders that started together (a gang, one cycle's grants) drift apart."""

    def __init__(self, interval_s: float, now: float, *, first_in: float | None = None) -> None:
        self.interval_s = interval_s
        self.due = now + (self._step() if first_in is None else first_in)

    def _step(self) -> float:
        return self.interval_s * (1.0 - BEAT_JITTER * random.random())

    def beaten(self, now: float) -> None:
        """The beat due was made (answered or not) at ``now``: the next is due an interval after it was due."""
        self.due += self._step()
        if self.due <= now:
            self.due = now + self._step()


class LeaseMonitor:
    """Heartbeats ``lease`` and reports notice and its end; stop it before releasing the lease."""

    def __init__(
        self,
        client: Client,
        lease: Lease,
        *,
        ttl_s: float,
        on_notice: NoticeListener,
        on_end: EndListener,
    ) -> None:
        self._client = client
        self._lease = lease
        self._interval = heartbeat_interval(ttl_s)
        self._on_notice = on_notice
        self._on_end = on_end
        self._stopping = threading.Event()
        self._noticed = lease.state == RequestState.PREEMPTING
        self._thread = threading.Thread(target=self._run, name=f"respools-lease-{lease.id[-8:]}", daemon=True)

    @property
    def interval_s(self) -> float:
        return self._interval

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to finish; it reports nothing more after this returns."""
        self._stopping.set()

    def join(self, timeout: float = JOIN_S) -> None:
        """Wait briefly for the thread: its long-poll wakes when the release changes the request."""
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # -- the thread --------------------------------------------------------------------------------

    def _run(self) -> None:
        beats = BeatSchedule(self._interval, time.monotonic())
        watched = RequestState.PREEMPTING if self._noticed else RequestState.ACTIVE
        while not self._stopping.is_set():
            now = time.monotonic()
            if now >= beats.due:
                if not self._beat():
                    return
                beats.beaten(time.monotonic())
                continue
            try:
                request = self._client.wait_request(self._lease.request_id, state=watched, timeout=beats.due - now)
            except (ServerUnreachable, ApiError) as exc:
                if isinstance(exc, ApiError) and exc.status in (401, 403, 404):
                    log.error("lease %s: cannot watch its request any more: %s", self._lease.id, exc)
                    return
                log.warning("lease %s: watching its request failed (%s); retrying", self._lease.id, exc)
                self._stopping.wait(RETRY_PAUSE_S)
                continue
            if self._stopping.is_set():
                return
            if request.state == watched and request.lease_id == self._lease.id:
                continue
            if not self._follow(request):
                return
            watched = request.state

    def _beat(self) -> bool:
        """One heartbeat; False once the lease has ended."""
        try:
            lease = self._client.heartbeat(self._lease.id)
        except ApiError as exc:
            if exc.status in (404, 409):
                self._ended(None)
                return False
            log.warning("lease %s: heartbeat refused (%s); retrying", self._lease.id, exc)
            self._stopping.wait(RETRY_PAUSE_S)
            return True
        except ServerUnreachable as exc:
            log.warning("lease %s: heartbeat failed (%s); retrying", self._lease.id, exc)
            self._stopping.wait(RETRY_PAUSE_S)
            return True
        if lease.state == RequestState.PREEMPTING:
            self._notice(lease, None)
        return True

    def _follow(self, request: Request) -> bool:
        """React to the request's new state; False once the lease has ended."""
        ours = request.lease_id == self._lease.id
        if ours and request.state == RequestState.PREEMPTING:
            try:
                lease = self._client.get_lease(self._lease.id)
            except (ServerUnreachable, ApiError) as exc:
                log.warning("lease %s: reading its notice failed (%s); using the heartbeat's", self._lease.id, exc)
                return self._beat()
            if lease.state == RequestState.PREEMPTING:
                self._notice(lease, request.reason)
                return True
        if ours and request.state in (RequestState.GRANTED, RequestState.ACTIVE):
            return True
        self._ended(request)
        return False

    def _notice(self, lease: Lease, message: str | None) -> None:
        if self._noticed or self._stopping.is_set():
            return
        self._noticed = True
        self._on_notice(lease, message)

    def _ended(self, request: Request | None) -> None:
        if self._stopping.is_set():
            return
        try:
            lease = self._client.get_lease(self._lease.id)
        except (ServerUnreachable, ApiError) as exc:
            log.warning("lease %s: ended; reading its final state failed (%s)", self._lease.id, exc)
            lease = self._lease.model_copy(update={"state": RequestState.EXPIRED})
        if not self._stopping.is_set():
            self._on_end(lease, request)

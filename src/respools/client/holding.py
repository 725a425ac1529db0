"""One granted attempt of a request, from the first heartbeat to the release.

Shared by the in-process lease (:mod:`respools.client.session`) and ``respools run``
(:mod:`respools.client.supervise`): both activate the lease, keep it alive, turn notice into a
:class:`LeasePreempted` and release it; they differ only in who the workload is (this thread, or a child
process) and so in how the news reaches it, which they pass in as listeners.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from respools.client.api import Client
from respools.client.errors import ApiError, LeaseLost, LeasePreempted, ServerUnreachable
from respools.client.monitor import LeaseMonitor
from respools.model import Lease, Pool, Request, RequestState

log = logging.getLogger("respools.client")

DEFAULT_TTL_S = 60.0

Listener = Callable[[type[LeaseLost]], None]
"""Told (from the heartbeat thread) of a notice or a loss, with the exception type that describes it."""
DeadlineListener = Callable[[], None]
"""Told (from a timer thread) that the preemption deadline passed while the lease is still held."""


class Holding:
    """A granted request's lease while this process holds it."""

    def __init__(
        self,
        client: Client,
        request: Request,
        *,
        on_notice: Listener,
        on_lost: Listener,
        on_deadline: DeadlineListener | None = None,
    ) -> None:
        if request.lease_id is None:
            raise ValueError(f"request {request.id} holds no lease")
        self.client = client
        self.request = request
        self.lease_id: str = request.lease_id
        self.lease: Lease | None = None
        self.pool: Pool | None = None
        self.notice: type[LeasePreempted] | None = None
        """Set once the lease got preemption notice."""
        self.noticed_at: float | None = None
        """``time.time()`` when this process heard the notice (for the preemption-delay measurement)."""
        self.lost: type[LeaseLost] | None = None
        """Set once the lease ended by the server's doing while held."""
        self.interrupted = threading.Event()
        """Set on notice or loss: what a sleeping step waits on."""
        self._on_notice = on_notice
        self._on_lost = on_lost
        self._on_deadline = on_deadline
        self._deadline_timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._monitor: LeaseMonitor | None = None
        self._released = False

    @property
    def attempt(self) -> int:
        return self.lease.attempt if self.lease is not None else self.request.attempt

    def activate(self) -> Lease:
        """First heartbeat (marks the lease active, starts its TTL), read the pool, start the monitor."""
        lease = self.client.heartbeat(self.lease_id)
        self.lease = lease
        try:
            self.pool = self.client.get_pool(lease.pool)
            ttl = self.pool.lease_ttl_s
        except ApiError as exc:  # a token that may not read the pool still holds the lease
            log.warning(
                "lease %s: cannot read pool %s (%s); assuming a %g s TTL", lease.id, lease.pool, exc, DEFAULT_TTL_S
            )
            ttl = DEFAULT_TTL_S
        if lease.state == RequestState.PREEMPTING:
            self._noticed(lease, None)
        self._monitor = LeaseMonitor(self.client, lease, ttl_s=ttl, on_notice=self._noticed, on_end=self._ended)
        self._monitor.start()
        return lease

    # -- news from the monitor ---------------------------------------------------------------------

    def _noticed(self, lease: Lease, message: str | None) -> None:
        with self._lock:
            if self.notice is not None or self._released:
                return
            self.noticed_at = time.time()
            self.lease = lease
            notice = self.notice = LeasePreempted.prepared(
                lease=lease, deadline=lease.preempt_deadline, reason=lease.preempt_reason, detail=message
            )
            self._arm_deadline()
        self.interrupted.set()
        log.info(
            "lease %s: preemption notice (%s); %s",
            lease.id,
            lease.preempt_reason.value if lease.preempt_reason else "no reason given",
            _deadline_text(lease.preempt_deadline),
        )
        self._on_notice(notice)

    def _ended(self, lease: Lease, request: Request | None) -> None:
        with self._lock:
            if self.lost is not None or self._released:
                return
            self.lease = lease
            state = request.state if request is not None and request.state != RequestState.PENDING else lease.state
            why = f" ({request.reason})" if request is not None and request.reason else ""
            lost = self.lost = LeaseLost.prepared(
                lease=lease, state=state, message=f"lease {lease.id} ended while held: {state.value}{why}"
            )
        self.interrupted.set()
        log.warning("lease %s ended while held: %s%s", lease.id, state.value, why)
        self._on_lost(lost)

    def _arm_deadline(self) -> None:
        """Fence (DESIGN §2.8): the holder, not only its backend, acts when the deadline passes while it
        still holds the lease; the service keeps the capacity until then, so acting is on us."""
        if self._on_deadline is None or self._deadline_timer is not None or not math.isfinite(self.time_left()):
            return
        timer = threading.Timer(max(0.0, self.time_left()), self._deadline_passed)
        timer.daemon = True
        timer.name = f"respools-deadline-{self.lease_id[-8:]}"
        self._deadline_timer = timer
        timer.start()

    def _deadline_passed(self) -> None:
        with self._lock:
            if self._released or self._on_deadline is None:
                return
        log.warning("lease %s: its preemption deadline passed and it is still held", self.lease_id)
        self._on_deadline()

    # -- the end -----------------------------------------------------------------------------------

    def time_left(self) -> float:
        """Seconds until the preemption deadline; infinite without notice."""
        lease = self.lease
        if self.notice is None or lease is None or lease.preempt_deadline is None:
            return float("inf")
        return (lease.preempt_deadline - datetime.now(UTC)).total_seconds()

    def stop_listening(self) -> None:
        """No more news after this: call before releasing, so the release is not reported as a loss."""
        with self._lock:
            self._released = True
            timer = self._deadline_timer
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        if self._monitor is not None:
            self._monitor.stop()

    def release(self) -> Lease | None:
        """Give the lease back; ``None`` when the server could not be told (the lease then expires after
        its TTL, which is the same outcome, later)."""
        self.stop_listening()
        try:
            lease: Lease | None = self.client.release(self.lease_id)
        except (ServerUnreachable, ApiError) as exc:
            log.warning("lease %s: release failed (%s); it will expire after its TTL", self.lease_id, exc)
            lease = None
        if self._monitor is not None:
            self._monitor.join()
        if lease is not None:
            self.lease = lease
        return lease

    def requeued_request(self) -> Request | None:
        """After a preemption or loss: the request, if the server put it back in the queue for another
        attempt (its ``attempt`` grew and it is still alive)."""
        if self.notice is None and self.lost is None:
            return None
        try:
            request = self.client.get_request(self.request.id)
        except (ServerUnreachable, ApiError) as exc:
            log.warning("request %s: cannot tell whether it was requeued (%s)", self.request.id, exc)
            return None
        alive = request.state in (RequestState.PENDING, RequestState.GRANTED, RequestState.ACTIVE)
        return request if alive and request.attempt > self.attempt else None


def _deadline_text(deadline: datetime | None) -> str:
    if deadline is None:
        return "no deadline given"
    left = (deadline - datetime.now(UTC)).total_seconds()
    return f"deadline {deadline.isoformat(timespec='seconds')} ({left:.1f} s left)"

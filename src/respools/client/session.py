"""``respools.lease(...)``: hold a lease for a block of Python code.

Entering waits for the grant (long-poll, with a progress line on a terminal), activates the lease, sets
its environment in ``os.environ``, registers this process with the host agent and starts the heartbeat
thread; leaving undoes all of that in reverse and releases the lease — on success, on an exception and on
Ctrl-C alike. While inside, preemption notice is raised in this thread as :class:`LeasePreempted`.

A session can be entered again. After a preemption that the server answered with a requeue (the request
asked for ``max_retries``), the next entry waits on the *same* request at its original place in the queue
with ``attempt + 1``; otherwise the next entry submits a fresh request. The request stays queued for a
rerun only if :class:`LeasePreempted` (or :class:`LeaseLost`) propagated out of the block, that is, the
step did not finish; a block that swallowed the notice and ended normally is done, and its requeued
request is withdrawn. :func:`respools.requires` and ``respools run`` are loops over exactly this.
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
from collections.abc import Mapping
from types import TracebackType

from respools.backends import Realization
from respools.client.api import Client
from respools.client.delivery import AsyncDelivery
from respools.client.environment import (
    LEASE_ID_ENV,
    EnvOverlay,
    realize,
    register_local_holder,
    unregister_local_holder,
)
from respools.client.errors import ApiError, LeaseLost, NoActiveLease, ServerUnreachable
from respools.client.fence import FENCED_EXIT_STATUS, end_process, start_reporter
from respools.client.holding import Holding
from respools.client.hooks import Hooks
from respools.client.queue import QueueEntry
from respools.model import Lease, RequestSpec

log = logging.getLogger("respools.client")

_current: contextvars.ContextVar[LeaseSession | None] = contextvars.ContextVar("respools_lease", default=None)
_default_client: Client | None = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The process-wide client configured from the environment and config file, built on first use."""
    global _default_client
    with _default_lock:
        if _default_client is None:
            _default_client = Client()
        return _default_client


def checkpointed() -> Lease | None:
    """Report "checkpoint taken" for the lease this code runs under — the ``with respools.lease(...)``
    block, or, in a command started by ``respools run``, the lease in ``RESPOOLS_LEASE_ID`` — so that a
    preemption counts only the work since as lost. ``None`` (and nothing sent) where no lease is held,
    so a checkpoint helper can call it unconditionally; a report the server did not take is logged, not
    raised: losing the report must not fail the training that saved the checkpoint."""
    session = _current.get()
    lease_id = session.id if session is not None and session.held else os.environ.get(LEASE_ID_ENV)
    if not lease_id:
        return None
    client = session.client if session is not None else default_client()
    try:
        return client.checkpoint(lease_id)
    except (ApiError, ServerUnreachable) as exc:
        log.warning("lease %s: the checkpoint was not recorded (%s)", lease_id, exc)
        return None


def current_lease() -> LeaseSession:
    """The lease held by the code running now (inside ``with respools.lease(...)`` or a
    ``@respools.requires`` function): its ``attempt``, ``env``, ``preempted``…"""
    session = _current.get()
    if session is None:
        raise NoActiveLease(
            "no lease is held here: call this inside `with respools.lease(...)` or a @requires function"
        )
    return session


class LeaseSession:
    """What ``respools.lease(...)`` returns; ``with`` it to hold the lease."""

    def __init__(
        self,
        spec: RequestSpec,
        *,
        client: Client | None = None,
        hooks: Hooks[LeaseSession] | None = None,
        timeout: float | None = None,
        progress: bool | None = None,
        interrupt: bool = True,
        fence: bool = True,
    ) -> None:
        self.spec = spec
        self.interrupt = interrupt
        """Raise notice in the step's thread; ``False`` leaves it to ``check()`` / ``preempted``."""
        self.fence = fence
        """End this process (after releasing the lease) if the block is still running at the preemption
        deadline; ``False`` leaves stopping to the caller, the lease staying overdue (holding its GPUs)
        until the block ends or its heartbeats stop for a TTL."""
        self.hooks: Hooks[LeaseSession] = hooks or Hooks()
        self._client = client
        self._timeout = timeout
        self._progress = progress
        self._queue: QueueEntry | None = None
        self._holding: Holding | None = None
        self._last: Holding | None = None
        self._delivery = AsyncDelivery()
        self._overlay = EnvOverlay()
        self._context: contextvars.Token[LeaseSession | None] | None = None
        self._registered = False
        self.realization: Realization | None = None
        """How the pool's backend realized the current (or last) lease: ``env``, ``native``, ``notes``."""

    # -- what the step reads -----------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = default_client()
        return self._client

    @property
    def held(self) -> bool:
        return self._holding is not None

    @property
    def lease(self) -> Lease:
        """The lease as the server last described it (current attempt, else the last one)."""
        holding = self._holding or self._last
        if holding is None or holding.lease is None:
            raise NoActiveLease("this lease session has not been granted yet")
        return holding.lease

    @property
    def id(self) -> str:
        return self.lease.id

    @property
    def request_id(self) -> str:
        return self.lease.request_id

    @property
    def pool(self) -> str:
        return self.lease.pool

    @property
    def attempt(self) -> int:
        """0 on the first run, n after n preemptions that requeued the request: resume when > 0."""
        return self.lease.attempt

    @property
    def env(self) -> Mapping[str, str]:
        """The variables set for the lease (``CUDA_VISIBLE_DEVICES``, ``RESPOOLS_LEASE_ID``…)."""
        return dict(self.realization.env) if self.realization is not None else {}

    @property
    def preempted(self) -> bool:
        """True once the current lease got preemption notice."""
        return self._holding is not None and self._holding.notice is not None

    @property
    def lost(self) -> bool:
        """True once the current lease ended by the server's doing (expired, revoked, cancelled)."""
        return self._holding is not None and self._holding.lost is not None

    @property
    def noticed_at(self) -> float | None:
        """``time.time()`` when this process heard the current (or last) lease's preemption notice."""
        holding = self._holding or self._last
        return holding.noticed_at if holding is not None else None

    @property
    def time_left(self) -> float:
        """Seconds until the preemption deadline (``inf`` without notice; negative once it passed)."""
        return self._holding.time_left() if self._holding is not None else float("inf")

    def checkpointed(self) -> Lease:
        """Report that the step just saved a checkpoint, so that a preemption counts only the work since
        as lost (``lost`` in ``GET /v1/usage``). Call it after the checkpoint is safely written."""
        holding = self._holding
        if holding is None:
            raise NoActiveLease("checkpointed() needs a held lease")
        return self.client.checkpoint(holding.lease_id)

    def check(self) -> None:
        """Raise :class:`LeasePreempted` if the lease got notice (:class:`LeaseLost` if it ended); for loops
        that prefer polling to being interrupted. An exception already on its way to this thread is
        withdrawn, so the step sees one, not two."""
        holding = self._holding
        if holding is None:
            return
        pending = holding.notice or holding.lost
        if pending is None:
            return
        if threading.get_ident() == self._owner_thread():
            self._delivery.withdraw()
        raise pending()

    def sleep(self, seconds: float) -> None:
        """``time.sleep`` that ends early with :class:`LeasePreempted` when notice arrives (an ordinary sleep
        is one long C call, during which an asynchronous exception waits)."""
        holding = self._holding
        if holding is None:
            raise NoActiveLease("sleep() needs a held lease")
        holding.interrupted.wait(max(0.0, seconds))
        self.check()

    def cancel(self) -> None:
        """Withdraw a request that waits for another attempt (after a requeue) when no rerun will follow."""
        if self._holding is not None:
            raise RuntimeError("the lease is held: leave the `with` block to release it")
        if self._queue is not None:
            self._queue.withdraw()

    def __repr__(self) -> str:
        holding = self._holding or self._last
        if holding is None or holding.lease is None:
            return f"<LeaseSession not granted: {self.spec.resources}>"
        lease = holding.lease
        return f"<LeaseSession {lease.id} pool={lease.pool} attempt={lease.attempt} state={lease.state.value}>"

    # -- the block ---------------------------------------------------------------------------------

    def __enter__(self) -> LeaseSession:
        if self._holding is not None:
            raise RuntimeError("this lease is held already; create another respools.lease(...) for a second one")
        if self._queue is None:
            self._queue = QueueEntry(self.client, self.spec, timeout=self._timeout, progress=self._progress)
        request = self._queue.wait_for_grant()
        holding = Holding(
            self.client, request, on_notice=self._on_notice, on_lost=self._on_lost, on_deadline=self._on_deadline
        )
        self._holding = holding
        try:
            lease = holding.activate()
            self.realization = realize(lease, holding.pool)
            self._overlay.apply(self.realization.env)
            self._registered = register_local_holder(lease)
            self._context = _current.set(self)
            self.hooks.call("on_granted", self)
            if self.interrupt:
                self._delivery.arm()
            early = holding.notice or holding.lost
            if early is not None:  # notice came before the block began: the step never starts
                raise early()
        except BaseException as exc:
            self._finish_guarded(exc)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._finish_guarded(exc)

    def _finish_guarded(self, exc: BaseException | None) -> None:
        try:
            self._finish(exc)
        except LeaseLost:
            if self._holding is None:
                raise  # _finish ran; this is an outer lease's news it passed on
            self._finish(exc)  # ours landed as _finish was called, before its first line: run it now

    def _finish(self, exc: BaseException | None) -> None:
        """Undo the entry in reverse and release; decide whether the request stays queued for a rerun."""
        holding = self._holding
        assert holding is not None and self._queue is not None
        foreign: LeaseLost | None = None
        try:
            self._delivery.disarm()
        except LeaseLost as late:  # sent just as the block ended; see respools.client.delivery
            if late.lease is None or late.lease.id != holding.lease_id:
                foreign = late  # another (outer) lease's notice: it must still reach its owner
        try:
            holding.stop_listening()
            self._overlay.restore()
            if self._registered and holding.lease is not None:
                unregister_local_holder(holding.lease)
                self._registered = False
            if self._context is not None:
                _current.reset(self._context)
                self._context = None
        finally:
            holding.release()
            self._holding = None
            self._last = holding
        self.hooks.call("on_released", self)
        self._settle_request(holding, exc)
        if foreign is not None:
            raise foreign

    def _settle_request(self, holding: Holding, exc: BaseException | None) -> None:
        assert self._queue is not None
        requeued = holding.requeued_request()
        if requeued is None:
            self._queue.done()
            return
        self._queue.requeued(requeued)
        ours = isinstance(exc, LeaseLost) and exc.lease is not None and exc.lease.id == holding.lease_id
        if isinstance(exc, LeaseLost) and ours:
            exc.requeued = True
            exc.next_attempt = requeued.attempt
            log.info("request %s requeued for attempt %d", requeued.id, requeued.attempt)
            self.hooks.call("on_requeued", self)
        else:
            self._queue.withdraw()  # the block ended otherwise: nobody will rerun it

    # -- news from the heartbeat thread ------------------------------------------------------------

    def _owner_thread(self) -> int | None:
        return self._delivery.thread_id

    def _on_notice(self, notice: type[LeaseLost]) -> None:
        self._delivery.deliver(notice)
        self.hooks.call("on_preempted", self)

    def _on_lost(self, lost: type[LeaseLost]) -> None:
        self._delivery.deliver(lost)

    def _on_deadline(self) -> None:
        """The block is still running at the deadline (DESIGN §2.8): the service keeps the lease's GPUs
        for it (overdue) until it is released, so this process fences itself (:mod:`respools.client.fence`):
        it ends at once, exit status :data:`FENCED_EXIT_STATUS` (a SIGKILL's, which is what a backend's
        stop would have given), and its release is reported the moment it is gone. With ``fence=False``
        the caller stops the work itself, and the lease stays overdue until it does."""
        holding = self._holding
        if holding is None:
            return
        if not self.fence:
            log.warning(
                "lease %s: the preemption deadline passed inside the block; fence=False: stop the work and leave "
                "the block now (the lease holds its GPUs, overdue, until then)",
                holding.lease_id,
            )
            return
        log.error(
            "lease %s: still inside its block at the preemption deadline: ending this process (exit status %d); "
            "its release is reported once it is gone; pass fence=False to respools.lease() to handle the "
            "deadline yourself",
            holding.lease_id,
            FENCED_EXIT_STATUS,
        )
        holding.stop_listening()
        if not start_reporter(self.client, holding.lease_id):
            holding.release()
        end_process()

"""A request's place in the queue, across attempts: submitted once, waited on, and — after a preemption
that the server answered with a requeue — waited on again under the same id, so it keeps its original
position (DESIGN §2.8).

Waiting survives a restarting server: the request lives in the server's store, so the wait simply resumes
once the server answers again (up to ``unreachable_patience_s`` of silence). A server that has never
answered this client gets no such patience: that is a wrong URL or a server not started, better said at
once than after ten minutes.
"""

from __future__ import annotations

import logging
import time

from respools.client.api import LONG_POLL_S, Client, new_idempotency_key
from respools.client.errors import ApiError, NotGranted, ServerUnreachable, WaitTimeout
from respools.client.progress import WaitProgress
from respools.model import Request, RequestSpec, RequestState

log = logging.getLogger("respools.client")

DEFAULT_UNREACHABLE_PATIENCE_S = 600.0
UNREACHABLE_PAUSE_S = 1.0
HELD_STATES = frozenset({RequestState.GRANTED, RequestState.ACTIVE, RequestState.PREEMPTING})


class QueueEntry:
    """One request for ``spec``, from submission until it is done or withdrawn."""

    def __init__(
        self,
        client: Client,
        spec: RequestSpec,
        *,
        timeout: float | None = None,
        progress: bool | None = None,
        unreachable_patience_s: float = DEFAULT_UNREACHABLE_PATIENCE_S,
    ) -> None:
        self.client = client
        self.spec = spec
        self.timeout = timeout
        self.progress = progress
        self.unreachable_patience_s = unreachable_patience_s
        self.request: Request | None = None
        """The live request (pending, or requeued after a preemption); ``None`` before and after."""
        self._submitting: RequestSpec | None = None
        """The spec (with its idempotency key) of a submit whose answer has not arrived yet."""

    def wait_for_grant(self) -> Request:
        """Submit (unless a requeued request is waiting already) and wait until it holds a lease.

        Raises :class:`NotGranted` when it is rejected or cancelled, :class:`WaitTimeout` (after cancelling
        it) when ``timeout`` passes first. Interrupting the wait (Ctrl-C) cancels the request."""
        started = time.monotonic()
        with WaitProgress(self.spec, interactive=self.progress) as progress:
            try:
                request = self._wait(started, progress)
            except BaseException:
                self.withdraw()
                raise
        if request.state in HELD_STATES and request.lease_id is not None:
            self.request = request
            return request
        self.request = None
        raise NotGranted(request)

    def _wait(self, started: float, progress: WaitProgress) -> Request:
        """Submit if needed, then long-poll while pending; a silent server is waited out."""
        request = self.request
        silent_since: float | None = None
        while request is None or request.state == RequestState.PENDING:
            waited = time.monotonic() - started
            remaining = None if self.timeout is None else self.timeout - waited
            if request is not None and remaining is not None and remaining <= 0:
                self.withdraw()
                raise WaitTimeout(request, waited)
            poll = max(
                0.0, min(LONG_POLL_S, progress.poll_s or LONG_POLL_S, LONG_POLL_S if remaining is None else remaining)
            )
            try:
                if request is None:
                    request = self._submit(poll, progress)
                else:
                    request = self.client.wait_request(request.id, state=RequestState.PENDING, timeout=poll)
            except ServerUnreachable as exc:
                silent_since = silent_since or time.monotonic()
                out_of_time = remaining is not None and remaining <= 0
                patience = self.unreachable_patience_s if self.client.answered else 0.0
                if out_of_time or time.monotonic() - silent_since > patience:
                    raise
                progress.note(f"server unreachable ({type(exc.cause).__name__}), retrying")
                time.sleep(UNREACHABLE_PAUSE_S)
                continue
            silent_since = None
            progress.update(request)
        return request

    def _submit(self, wait: float, progress: WaitProgress) -> Request:
        """Queue the request; a retry after a lost answer reuses the key, so it is queued once."""
        if self._submitting is None:
            key = self.spec.idempotency_key or new_idempotency_key()
            self._submitting = self.spec.model_copy(update={"idempotency_key": key})
        request = self.client.submit(self._submitting, wait=wait)
        self.request, self._submitting = request, None
        log.debug("request %s submitted (%s)", request.id, request.state.value)  # a wait says itself: progress
        return request

    def requeued(self, request: Request) -> None:
        """Keep waiting on ``request``, which the server put back in the queue."""
        self.request = request

    def done(self) -> None:
        """The request finished (released, or ended for good); the next wait submits a new one."""
        self.request = None

    def withdraw(self) -> None:
        """Cancel the live request, if any (a pending one leaves the queue, a granted one is released)."""
        request, self.request = self.request, None
        submitting, self._submitting = self._submitting, None
        try:
            if request is None and submitting is not None and not self.client.answered:
                return  # the server never answered this client: the submit cannot have been queued
            if request is None and submitting is not None:
                # Interrupted before the submit's answer arrived: the same key finds the request, if the
                # server queued it (or queues it now, to be cancelled at once).
                request = self.client.submit(submitting)
            if request is None:
                return
            self.client.cancel_request(request.id)
        except (ApiError, ServerUnreachable) as exc:
            which = request.id if request is not None else "being submitted"
            log.warning("request %s: cancelling it failed (%s); a grant will expire unused", which, exc)

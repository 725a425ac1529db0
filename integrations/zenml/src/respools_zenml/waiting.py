"""The orchestrator's side of a lease: find the step's request and wait until it is decided, before any
process or pod for the step exists.

Waiting here rather than in the step means a queued step costs nothing: no Python process with the user's
imports sitting idle, no pod holding a node. The step is started only once its lease is granted; it then
holds the lease itself (:mod:`respools_zenml.holding`).
"""

from __future__ import annotations

import logging
import threading
import time

from respools import Client
from respools.model import Request, RequestState
from respools_zenml.identity import StepIdentity
from respools_zenml.leasing import LeaseArgs

log = logging.getLogger(__name__)

LONG_POLL_S = 25.0
STOPPABLE_POLL_S = 5.0
"""Long-poll length where the wait can be stopped (a dynamic pipeline's isolated steps)."""
SUBMIT_WAIT_S = 2.0
"""A request that fits is granted within a reconciler tick; waiting that long saves saying it is queued."""
MAX_GENERATIONS = 1000
ENDED_FOR_GOOD = frozenset(
    {RequestState.RELEASED, RequestState.CANCELLED, RequestState.EXPIRED, RequestState.PREEMPTED}
)
"""A request in one of these states will never be granted again: the step needs a new one. (A rejected
request is final too, but a new one would be rejected for the same reason.)"""
HELD = frozenset({RequestState.GRANTED, RequestState.ACTIVE, RequestState.PREEMPTING})


class WaitStopped(RuntimeError):
    """The pipeline asked to stop the step while it waited for its grant."""


class AllocationTimeout(RuntimeError):
    """No grant came within the step's ``ResourceSettings.allocation_wait_timeout_seconds``; the request
    was cancelled, so it holds no place in the queue and nothing is granted to a step that gave up."""

    def __init__(self, step_name: str, request: Request, timeout_s: float) -> None:
        super().__init__(
            f"Timed out after {timeout_s:g} seconds waiting for respools request {request.id} of step "
            f"{step_name!r} to be granted ({request.reason or 'queued'}); the request was cancelled. Increase "
            "ResourceSettings.allocation_wait_timeout_seconds on this step to wait longer."
        )
        self.request = request


class LeaseRefused(RuntimeError):
    """The step's request can never be granted (rejected, or withdrawn by an admin); says why."""

    def __init__(self, step_name: str, request: Request) -> None:
        why = request.reason or "no reason given"
        super().__init__(f"step {step_name!r}: respools request {request.id} was {request.state.value}: {why}")
        self.request = request


def claim(client: Client, args: LeaseArgs, identity: StepIdentity) -> tuple[LeaseArgs, Request]:
    """Submit the step's request, or find it again: a retry gets back a request that was requeued after a
    preemption (same key, original queue position); after one that ended for good, the next generation."""
    for generation in range(MAX_GENERATIONS):
        candidate = args.with_key(identity.request_key(generation))
        request = client.submit(candidate.spec(), wait=SUBMIT_WAIT_S)
        if request.state not in ENDED_FOR_GOOD:
            return candidate, request
    raise RuntimeError(f"step {identity.step_name!r}: {MAX_GENERATIONS} requests ended already; giving up")


def wait_for_grant(
    client: Client,
    request: Request,
    step_name: str,
    timeout_s: float | None = None,
    stop: threading.Event | None = None,
) -> Request:
    """Long-poll until the request holds a lease; :class:`LeaseRefused` when it never will,
    :class:`AllocationTimeout` (after cancelling it) when ``timeout_s`` passed first, :class:`WaitStopped`
    once ``stop`` is set (polls are then short, so a stop is seen within seconds). Logs the queue position
    and the reason for waiting whenever they change, so a waiting pipeline says why."""
    shown: tuple[int | None, str | None] | None = None
    give_up_at = time.monotonic() + timeout_s if timeout_s is not None else None
    poll_s = STOPPABLE_POLL_S if stop is not None else LONG_POLL_S
    while request.state == RequestState.PENDING:
        if stop is not None and stop.is_set():
            raise WaitStopped(f"step {step_name!r} was stopped while it waited for respools capacity")
        left = give_up_at - time.monotonic() if give_up_at is not None else poll_s
        if left <= 0:
            assert timeout_s is not None
            request = _cancel_unless_granted(client, request)
            if request.state in HELD and request.lease_id is not None:
                break  # granted in the last instant: take it rather than throw it away
            raise AllocationTimeout(step_name, request, timeout_s)
        now = (request.queue_position, request.wait_reason.value if request.wait_reason else None)
        if now != shown:
            log.info(
                "Step %s waits for respools capacity: position %s in the queue (%s).",
                step_name,
                request.queue_position if request.queue_position is not None else "?",
                request.reason or now[1] or "queued",
            )
            shown = now
        request = client.wait_request(request.id, state=RequestState.PENDING, timeout=min(left, poll_s))
    if request.state in HELD and request.lease_id is not None:
        log.info("Step %s was granted lease %s (attempt %d).", step_name, request.lease_id, request.attempt + 1)
        return request
    raise LeaseRefused(step_name, request)


def _cancel_unless_granted(client: Client, request: Request) -> Request:
    """Cancel a pending request; a grant that came first is returned instead (cancelling a request also
    ends its lease, which would throw away capacity the step can use now)."""
    latest = client.get_request(request.id)
    if latest.state != RequestState.PENDING:
        return latest
    return client.cancel_request(request.id)


def withdraw(client: Client, request: Request) -> None:
    """Cancel a request nobody will use (the run was interrupted while it waited)."""
    try:
        client.cancel_request(request.id)
    except Exception as exc:  # best effort on the way out; a grant would expire unused
        log.warning("respools: could not cancel request %s: %s", request.id, exc)

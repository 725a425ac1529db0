"""The orchestrator's side of a lease: find the step's request and wait until it is decided, before any
process or pod for the step exists.

Waiting here rather than in the step means a queued step costs nothing: no Python process with the user's
imports sitting idle, no pod holding a node. The step is started only once its lease is granted; it then
holds the lease itself (:mod:`respools_zenml.holding`).
"""

from __future__ import annotations

import logging

from respools import Client
from respools.model import Request, RequestState
from respools_zenml.identity import StepIdentity
from respools_zenml.leasing import LeaseArgs

log = logging.getLogger(__name__)

LONG_POLL_S = 25.0
SUBMIT_WAIT_S = 2.0
"""A request that fits is granted within a reconciler tick; waiting that long saves saying it is queued."""
MAX_GENERATIONS = 1000
ENDED_FOR_GOOD = frozenset(
    {RequestState.RELEASED, RequestState.CANCELLED, RequestState.EXPIRED, RequestState.PREEMPTED}
)
"""A request in one of these states will never be granted again: the step needs a new one. (A rejected
request is final too, but a new one would be rejected for the same reason.)"""
HELD = frozenset({RequestState.GRANTED, RequestState.ACTIVE, RequestState.PREEMPTING})


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


def wait_for_grant(client: Client, request: Request, step_name: str) -> Request:
    """Long-poll until the request holds a lease; :class:`LeaseRefused` when it never will. Logs the queue
    position and the reason for waiting whenever they change, so a waiting pipeline says why."""
    shown: tuple[int | None, str | None] | None = None
    while request.state == RequestState.PENDING:
        now = (request.queue_position, request.wait_reason.value if request.wait_reason else None)
        if now != shown:
            log.info(
                "Step %s waits for respools capacity: position %s in the queue (%s).",
                step_name,
                request.queue_position if request.queue_position is not None else "?",
                request.reason or now[1] or "queued",
            )
            shown = now
        request = client.wait_request(request.id, state=RequestState.PENDING, timeout=LONG_POLL_S)
    if request.state in HELD and request.lease_id is not None:
        log.info("Step %s was granted lease %s (attempt %d).", step_name, request.lease_id, request.attempt + 1)
        return request
    raise LeaseRefused(step_name, request)


def withdraw(client: Client, request: Request) -> None:
    """Cancel a request nobody will use (the run was interrupted while it waited)."""
    try:
        client.cancel_request(request.id)
    except Exception as exc:  # best effort on the way out; a grant would expire unused
        log.warning("respools: could not cancel request %s: %s", request.id, exc)

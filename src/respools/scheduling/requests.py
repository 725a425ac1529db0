"""A pending request as the cycle sees it: demand, device shape and the pools it may go to.

Queues are long and mostly made of look-alikes (the same step submitted many times), so everything
that does not depend on the request's identity is computed once per *group* of requests that agree on
subject, resources, constraints and candidate pools, and shared by reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from respools.model import STEP_RUN, Request
from respools.scheduling.placement import Shape, shape_of
from respools.scheduling.state import PoolState, SubjectQuota
from respools.scheduling.vectors import Vector, scaled


@dataclass(slots=True)
class RequestGroup:
    """What the requests of one group share, including what the cycle learnt about them."""

    candidates: list[tuple[PoolState, SubjectQuota]] = field(default_factory=list)
    """Eligible pools in policy-priority order."""
    rejection: str | None = None
    signature: tuple[object, ...] = ()
    """Requests of one subject with equal signatures fail alike when one's demand dominates the other's."""
    failure: object | None = None
    """The shortfall every request of the group meets for the rest of the cycle, once known."""
    failures_seen: int = 0
    members: list[Request] = field(default_factory=list)
    """The group's requests not yet decided, the next one last (so that taking it is a pop)."""


@dataclass(slots=True)
class RequestView:
    request: Request
    id: str
    subject: str
    demand: Vector
    """Resources times replicas (step_run once): what the quota is charged."""
    shape: Shape
    preemptible: bool
    priority: int
    submitted_ts: float
    group: RequestGroup

    @property
    def candidates(self) -> list[tuple[PoolState, SubjectQuota]]:
        return self.group.candidates

    def sibling(self, request: Request) -> RequestView:
        """A view of a look-alike request sharing this one's derived data."""
        return RequestView(
            request,
            request.id,
            self.subject,
            self.demand,
            self.shape,
            self.preemptible,
            self.priority,
            request.submitted_at.timestamp(),
            self.group,
        )


def group_key(request: Request) -> tuple[object, ...]:
    """Everything but identity and submission time. Priority sits at index 3 and the nominated pool
    last, so that ``key[:3] + key[4:9]`` is what eligibility depends on."""
    return (
        request.subject,
        tuple(request.resources.items()),  # insertion order: look-alike steps are written alike
        request.preemptible,
        request.priority,
        request.replicas,
        request.gpu_class,
        tuple(sorted(request.selectors.items())) if request.selectors else (),
        tuple(request.pools) if request.pools is not None else None,
        request.max_runtime_s,
        request.nominated_pool,
    )


def view_of(request: Request) -> RequestView:
    shape = shape_of(request.resources, request.replicas, request.gpu_class, request.selectors)
    demand = scaled(request.resources, request.replicas)
    demand[STEP_RUN] = request.resources.get(STEP_RUN, 1)
    return RequestView(
        request=request,
        id=request.id,
        subject=request.subject,
        demand=demand,
        shape=shape,
        preemptible=request.preemptible,
        priority=request.priority,
        submitted_ts=request.submitted_at.timestamp(),
        group=RequestGroup(),
    )

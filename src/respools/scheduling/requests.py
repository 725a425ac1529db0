"""A pending request as the cycle sees it: demand, device shape and the pools it may go to.

Queues are long and mostly made of look-alikes (the same step submitted many times), so everything
that does not depend on the request's identity is computed once per *group* of requests that agree on
subject, resources, constraints and candidate pools, and shared by reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

from respools.model import STEP_RUN, Request, WaitReason
from respools.scheduling.placement import Shape, shape_of
from respools.scheduling.state import PoolState, SubjectQuota
from respools.scheduling.vectors import Vector, scaled


@dataclass(slots=True)
class Eligibility:
    """Where the requests of a group may go, or why nowhere. Shared by every group of a subject that
    asks alike, whatever the request priority or nomination, which eligibility does not depend on."""

    candidates: list[tuple[PoolState, SubjectQuota]]
    """Eligible pools in policy-priority order."""
    rejection: str | None = None
    signature: tuple[object, ...] = ()
    """Requests of one subject with equal signatures fail alike when one's demand dominates the other's."""


@dataclass(slots=True)
class RequestGroup:
    """What the requests of one group share, including what the cycle learnt about them."""

    eligibility: Eligibility
    members: list[Request]
    """The group's requests not yet decided, the next one last (so that taking it is a pop)."""
    ids: list[str]
    """The ids of ``members``, in the same order."""
    failure: tuple[WaitReason, str] | None = None
    """The shortfall every request of the group meets for the rest of the cycle, once known."""


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
        return self.group.eligibility.candidates

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


_ELIGIBILITY_FIELDS = itemgetter("subject", "preemptible", "replicas", "gpu_class", "max_runtime_s")


def group_key(request: Request) -> tuple[object, ...]:
    """Everything but identity and submission time. The first four items are what eligibility depends
    on (request priority and the nominated pool follow), so ``key[:4]`` groups the groups that classify
    alike. Read through ``__dict__`` in one C-level call: the key is taken once per waiting request per
    cycle, and pydantic's attribute access costs several times more."""
    fields = request.__dict__
    selectors, pools = fields["selectors"], fields["pools"]
    return (
        _ELIGIBILITY_FIELDS(fields),
        tuple(fields["resources"].items()),  # insertion order: look-alike steps are written alike
        tuple(sorted(selectors.items())) if selectors else (),
        tuple(pools) if pools is not None else None,
        fields["priority"],
        fields["nominated_pool"],
    )


Derived = tuple[Vector, Shape]


def derived(request: Request, cache: dict[tuple[object, ...], Derived]) -> Derived:
    """Demand and device shape, shared by every request of the same resources and constraints (there
    are a handful of shapes in a queue of thousands)."""
    key = (tuple(request.resources.items()), request.replicas, request.gpu_class, tuple(request.selectors.items()))
    found = cache.get(key)
    if found is None:
        shape = shape_of(request.resources, request.replicas, request.gpu_class, request.selectors)
        demand = scaled(request.resources, request.replicas)
        demand[STEP_RUN] = request.resources.get(STEP_RUN, 1)
        found = cache[key] = (demand, shape)
    return found


def view_of(request: Request, group: RequestGroup, cache: dict[tuple[object, ...], Derived]) -> RequestView:
    demand, shape = derived(request, cache)
    return RequestView(
        request,
        request.id,
        request.subject,
        demand,
        shape,
        request.preemptible,
        request.priority,
        request.submitted_at.timestamp(),
        group,
    )

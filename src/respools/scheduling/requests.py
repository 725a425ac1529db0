"""A pending request as the cycle sees it: demand, device shape and the pools it may go to.

Queues are long and mostly made of look-alikes (the same step submitted many times), so everything
that does not depend on the request's identity is computed once per *group* of requests that agree on
subject, resources, constraints and candidate pools, and shared by reference.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import Any

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
    """The group's requests not yet decided, oldest first (the queue's order, as bucketed)."""
    ids: list[str]
    """The ids of ``members``, in the same order."""
    times: list[datetime]
    """The submission times of ``members``, in the same order: read while bucketing, which reads
    every request anyway, so that ordering the group's requests never reads them again."""
    failure: tuple[WaitReason, str] | None = None
    """The shortfall the group's last request served met."""
    failed_at: tuple[int, ...] = ()
    """The versions of the group's pools when it did (``PoolState.version``): while they are the same,
    the group's next requests meet it too."""


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

    def sibling(self, request: Request, submitted_ts: float | None = None) -> RequestView:
        """A view of a look-alike request sharing this one's derived data (``submitted_ts`` when the
        caller already has it)."""
        return RequestView(
            request,
            request.id,
            self.subject,
            self.demand,
            self.shape,
            self.preemptible,
            self.priority,
            request.submitted_at.timestamp() if submitted_ts is None else submitted_ts,
            self.group,
        )


GroupKey = tuple[
    tuple[str, bool, int, str | None, float | None],  # subject, preemptible, replicas, gpu_class, max_runtime_s
    tuple[tuple[str, int], ...],  # resources
    tuple[tuple[str, str], ...],  # selectors, sorted
    tuple[str, ...] | None,  # pools asked for
    int,  # request priority
    str | None,  # nominated pool
]
"""Everything but identity and submission time. The first four items are what eligibility depends on
(request priority and the nominated pool follow), so ``key[:4]`` groups the groups that classify alike."""
Derived = tuple[Vector, Shape]


@dataclass(slots=True, eq=False)
class KnownGroup:
    """A group key as ``GroupKeys`` knows it: one per key, shared by the requests that have it, and
    what the cycle derives from the key alone (demand and device shape), kept as long as the key."""

    key: GroupKey
    number: int
    eligibility_class: int
    """The same for every key that agrees on ``key[:4]`` (what eligibility depends on)."""
    derived: Derived | None = None


Buckets = dict[int, tuple[KnownGroup, list[Request], list[str], list[datetime]]]
"""Look-alike requests, their ids and submission times by group, each bucket oldest first (ties by id).
Keyed by a small number per distinct group key, so that requests already known are bucketed without
hashing their key."""

_ELIGIBILITY_FIELDS = itemgetter("subject", "preemptible", "replicas", "gpu_class", "max_runtime_s")
_SUBMISSION_ORDER = attrgetter("submitted_at", "id")


class GroupKeys:
    """Group keys of the requests seen so far, by request id, for a caller that schedules the same
    queue cycle after cycle (the reconciler's leader, the simulation): a queue of thousands is then
    bucketed without reading each request's spec and building its key again every cycle.

    Sound only where a request id always names the same request: subject, resources, constraints,
    candidate pools and priority never change once submitted (the store refuses an idempotent
    resubmission that asks differently). The nominated pool does change; it is compared every cycle."""

    def __init__(self) -> None:
        self.by_request: dict[str, KnownGroup] = {}
        self.groups: dict[GroupKey, KnownGroup] = {}
        self.next_number = itertools.count()
        self.classes: dict[tuple[object, ...], int] = {}
        """Eligibility class numbers by ``key[:4]``; a number is never given twice, so what is kept
        per class (``Memory.eligibility``) can never be taken for another class's."""
        self.next_class = itertools.count()

    def forget_gone(self, queue: Sequence[Request]) -> None:
        """Keep only the requests still queued, once the ones gone outnumber them: a rebuild each
        time the queue has turned over, so the memo stays the size of the queue at O(1) a request."""
        if len(self.by_request) > 2 * len(queue) + 1024:
            known = self.by_request
            ids = [request.__dict__["id"] for request in queue]
            self.by_request = {request_id: known[request_id] for request_id in ids if request_id in known}
            self.groups = {group.key: group for group in self.by_request.values()}
            self.classes = {group.key[:4]: group.eligibility_class for group in self.groups.values()}

    def first_seen(self, key: GroupKey) -> KnownGroup:
        """A group for a key not seen before, numbered (and its eligibility class with it)."""
        eligibility_class = self.classes.get(key[:4])
        if eligibility_class is None:
            eligibility_class = self.classes[key[:4]] = next(self.next_class)
        group = self.groups[key] = KnownGroup(key, next(self.next_number), eligibility_class)
        return group


def bucketed(requests: Sequence[Request], keys: GroupKeys | None = None) -> Buckets:
    """Look-alike requests bucketed in queue order. The store hands the queue over in that order, which
    one pass confirms while it buckets; a queue out of order is sorted and bucketed again."""
    remember = keys is not None
    if keys is None:
        keys = GroupKeys()
    buckets = _bucket(requests, keys, remember)
    if buckets is None:
        buckets = _bucket(sorted(requests, key=_SUBMISSION_ORDER), keys, remember)
        assert buckets is not None, "a sorted queue is in order"
    if remember:
        keys.forget_gone(requests)
    return buckets


def _bucket(requests: Sequence[Request], keys: GroupKeys, remember: bool) -> Buckets | None:
    """Buckets in the given order, or None as soon as that order is not the queue's.

    This loop runs once per waiting request per cycle, so it reads each request once, through
    ``__dict__`` (pydantic's attribute access costs several times more), builds the key inline only
    for a request it has not seen before, and reads ids here, in the order the requests sit in memory,
    not later bucket by bucket."""
    buckets: Buckets = {}
    if not requests:
        return buckets
    known, groups = keys.by_request, keys.groups
    eligibility_fields = _ELIGIBILITY_FIELDS
    first = requests[0].__dict__
    last_submitted, last_id = first["submitted_at"], first["id"]
    for request in requests:
        fields = request.__dict__
        submitted, request_id = fields["submitted_at"], fields["id"]
        if submitted <= last_submitted and (submitted < last_submitted or request_id < last_id):
            return None
        last_submitted, last_id = submitted, request_id
        nominated = fields["nominated_pool"]
        entry = known.get(request_id)
        if entry is None or entry.key[5] != nominated:  # the key's nomination, which may be stale
            selectors, pools = fields["selectors"], fields["pools"]
            key: GroupKey = (  # ``group_key``, inlined: a new leader's first cycle builds thousands
                eligibility_fields(fields),
                tuple(fields["resources"].items()),  # insertion order: look-alike steps are written alike
                tuple(sorted(selectors.items())) if selectors else (),
                tuple(pools) if pools is not None else None,
                fields["priority"],
                nominated,
            )
            entry = groups.get(key) or keys.first_seen(key)  # the group's: the request's key is not kept
            if remember:
                known[request_id] = entry
        bucket = buckets.get(entry.number)
        if bucket is None:
            buckets[entry.number] = (entry, [request], [request_id], [submitted])
        else:
            bucket[1].append(request)
            bucket[2].append(request_id)
            bucket[3].append(submitted)
    return buckets


def group_key(fields: dict[str, Any]) -> GroupKey:
    """The group key of a request, from its ``__dict__``: what ``_bucket`` builds inline."""
    selectors, pools = fields["selectors"], fields["pools"]
    return (
        _ELIGIBILITY_FIELDS(fields),
        tuple(fields["resources"].items()),  # insertion order: look-alike steps are written alike
        tuple(sorted(selectors.items())) if selectors else (),
        tuple(pools) if pools is not None else None,
        fields["priority"],
        fields["nominated_pool"],
    )


def derived(request: Request, key: GroupKey, cache: dict[tuple[object, ...], Derived]) -> Derived:
    """Demand and device shape, shared by every request of the same resources and constraints (there
    are a handful of shapes in a queue of thousands); looked up by the parts of the group key that
    they depend on."""
    (_, _, replicas, gpu_class, _), resources, selectors = key[0], key[1], key[2]
    found = cache.get((resources, replicas, gpu_class, selectors))
    if found is None:
        shape = shape_of(request.resources, replicas, gpu_class, request.selectors)
        # Asking for 0 of a key asks for nothing: it must not make a pool without that key ineligible.
        demand = scaled({k: v for k, v in request.resources.items() if v}, replicas)
        demand[STEP_RUN] = request.resources.get(STEP_RUN, 1)
        found = cache[(resources, replicas, gpu_class, selectors)] = (demand, shape)
    return found


def view_of(
    request: Request, known: KnownGroup, group: RequestGroup, cache: dict[tuple[object, ...], Derived]
) -> RequestView:
    """The view of the request that stands for its group; demand and shape are derived once per
    group key (``known``), and then only when a look-alike key has not derived them yet."""
    key = known.key
    if known.derived is None:
        known.derived = derived(request, key, cache)
    demand, shape = known.derived
    fields = request.__dict__
    (subject, preemptible, _, _, _), priority = key[0], key[4]
    return RequestView(
        request,
        fields["id"],
        subject,
        demand,
        shape,
        preemptible,
        priority,
        fields["submitted_at"].timestamp(),
        group,
    )

"""The mutable accounting of one cycle: per pool, per subject usage, reserved share, limit and the
leases that hold capacity. Built from a snapshot, then updated in place as the cycle decides."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter

from respools.model import Form, Lease, PolicySpec, PoolSpec, RequestState, ReservationSpec
from respools.scheduling.placement import DeviceMap, Held, Shape, never_fits, possible_on_empty
from respools.scheduling.validation import pool_capacity
from respools.scheduling.vectors import Vector, add_into


@dataclass(slots=True)
class LeaseView:
    """What preemption planning needs of a live lease."""

    id: str
    subject: str
    resources: Vector
    borrowed: Vector
    priority: int
    preemptible: bool
    granted_ts: float
    preempting: bool
    preempted_for: str | None
    lease: Lease
    held: Held = ()
    """The lease's devices resolved on its pool's map (empty on pools without an inventory)."""


@dataclass(slots=True)
class SubjectQuota:
    """One subject's standing in one pool."""

    subject: str
    priority: int
    weight: float
    policy_reserved: Vector
    reserved: Vector
    limit: Vector | None
    usage: Vector = field(default_factory=dict)
    leases: list[LeaseView] = field(default_factory=list)
    leaving: Vector = field(default_factory=dict)
    """Usage of leases already told to go (preempting), which still hold their capacity."""
    incoming: Vector = field(default_factory=dict)
    """Demand of waiters that preempted and hold capacity, not yet granted."""
    version: int = 0
    """Bumped whenever the cycle changes this standing; what is derived from it is cached until then."""
    victims: tuple[int, object] | None = None
    """Preemption planning's view of these leases, with the version it was taken at."""

    def effective(self) -> Vector:
        """Usage once every preemption under way has completed: what fairness is judged on, so that
        several waiters in one cycle do not all count the same victim's share."""
        out = dict(self.usage)
        add_into(out, self.leaving, -1)
        add_into(out, self.incoming)
        return out

    def limit_of(self, key: str, capacity: int) -> int:
        if self.limit is None:
            return capacity
        return self.limit.get(key, capacity)

    def share(self, capacity: Vector, usage: Vector | None = None) -> float:
        """Weighted dominant share of borrowed capacity (Kueue's fair-sharing value).

        A subject that does not borrow has share 0 whatever its weight; a borrower of weight 0 ranks
        after every other borrower."""
        used = self.usage if usage is None else usage
        dominant = 0.0
        for key, cap in capacity.items():
            borrowed = used.get(key, 0) - self.reserved.get(key, 0)
            if borrowed > 0 and cap > 0:
                dominant = max(dominant, borrowed / cap)
        if dominant == 0.0:
            return 0.0
        return math.inf if self.weight == 0 else dominant / self.weight


@dataclass(slots=True)
class Window:
    start: float
    end: float
    resources: Vector


@dataclass(slots=True)
class PoolState:
    spec: PoolSpec
    capacity: Vector
    forms: frozenset[Form]
    free: Vector
    held: Vector
    quotas: dict[str, SubjectQuota]
    devices: DeviceMap | None
    windows: dict[str, list[Window]]
    """Reservations per subject that have not ended yet."""
    preempting: list[LeaseView] = field(default_factory=list)
    """Leases that were preempting when the cycle began (their waiters are nominated here)."""
    version: int = 0
    """Bumped whenever the cycle changes this pool's accounting (a grant, a preemption, a hold), so
    that what was derived from it can be cached until then (see ``preemption``)."""
    derived: dict[object, object] = field(default_factory=dict)
    derived_version: int = 0
    never_fits: dict[Shape, str | None] = field(default_factory=dict)
    """Per device shape, why it could not be placed even on the empty inventory (cached per cycle)."""
    never_eligible: dict[tuple[object, ...], str | None] = field(default_factory=dict)
    """Per request shape, what rules it out on this pool whoever asks (cached per cycle)."""
    _empty: DeviceMap | None = None

    def placement_impossible(self, shape: Shape) -> str | None:
        if shape not in self.never_fits:
            quick = self.devices.fits_when_empty(shape) if self.devices is not None else None
            if quick is None:  # constrained: try it on a map of the empty inventory
                if self._empty is None:
                    self._empty = DeviceMap(self.spec)
                self.never_fits[shape] = possible_on_empty(self._empty, shape)
            else:
                self.never_fits[shape] = None if quick or not shape.needs_devices else never_fits(shape)
        return self.never_fits[shape]

    @property
    def name(self) -> str:
        return self.spec.name

    def changed(self, *quotas: SubjectQuota) -> None:
        """Record that the cycle changed this pool's accounting, and these subjects' standing in it."""
        self.version += 1
        for quota in quotas:
            quota.version += 1

    def cache(self) -> dict[object, object]:
        """A memo that lives as long as the pool's accounting does not change."""
        if self.derived_version != self.version:
            self.derived.clear()
            self.derived_version = self.version
        return self.derived


def build_pools(
    now: datetime,
    pools: Sequence[PoolSpec],
    policies: Sequence[PolicySpec],
    reservations: Sequence[ReservationSpec],
    leases: Sequence[Lease],
) -> dict[str, PoolState]:
    now_ts = now.timestamp()
    states: dict[str, PoolState] = {}
    for pool in sorted(pools, key=lambda p: p.name):
        capacity = {k: v for k, v in pool_capacity(pool).items() if v > 0}
        states[pool.name] = PoolState(
            spec=pool,
            capacity=capacity,
            forms=frozenset(pool.forms) if pool.forms is not None else frozenset(Form),
            free=dict(capacity),
            held={},
            quotas={},
            devices=DeviceMap(pool) if pool.inventory is not None else None,
            windows={},
        )
    for policy in sorted(policies, key=lambda p: (p.pool, p.subject)):
        state = states.get(policy.pool)
        if state is None:
            continue
        state.quotas[policy.subject] = SubjectQuota(
            subject=policy.subject,
            priority=policy.priority,
            weight=policy.weight,
            policy_reserved=dict(policy.reserved),
            reserved=dict(policy.reserved),
            limit=dict(policy.limit) if policy.limit is not None else None,
        )
    for reservation in reservations:
        state = states.get(reservation.pool)
        start, end = reservation.start.timestamp(), reservation.end.timestamp()
        if state is None or end <= now_ts:
            continue
        state.windows.setdefault(reservation.subject, []).append(Window(start, end, reservation.resources))
        quota = _quota(state, reservation.subject)
        if start <= now_ts:
            add_into(quota.reserved, reservation.resources)
    # Fields are read through ``__dict__``: a snapshot holds thousands of leases, and pydantic's
    # attribute access costs several times more than a dict lookup.
    for lease in sorted(leases, key=attrgetter("id")):
        fields = lease.__dict__
        state = states.get(fields["pool"])
        if state is None:
            continue
        subject, resources = fields["subject"], fields["resources"]
        preempting = fields["state"] == RequestState.PREEMPTING
        quota = state.quotas.get(subject) or _quota(state, subject)
        usage, free = quota.usage, state.free
        for key, amount in resources.items():
            usage[key] = usage.get(key, 0) + amount
            if key in free:
                free[key] -= amount
        if preempting:
            add_into(quota.leaving, resources)
        view = LeaseView(
            fields["id"],
            subject,
            resources,
            fields["borrowed"],
            fields["priority"],
            fields["preemptible"],
            fields["granted_at"].timestamp(),
            preempting,
            fields["preempted_for"],
            lease,
        )
        quota.leases.append(view)
        if preempting:
            state.preempting.append(view)
        if state.devices is not None:
            view.held = state.devices.resolve(fields["placement"])
            state.devices.apply(view.held)
    return states


def _quota(state: PoolState, subject: str) -> SubjectQuota:
    """A subject that holds a lease or a reservation without a policy (the policy was deleted since)
    still has usage to account for; it gets no reserved share of its own."""
    quota = state.quotas.get(subject)
    if quota is None:
        quota = SubjectQuota(subject, priority=0, weight=1.0, policy_reserved={}, reserved={}, limit={})
        state.quotas[subject] = quota
    return quota

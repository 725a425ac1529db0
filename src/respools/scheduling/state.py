"""The mutable accounting of one cycle: per pool, per subject usage, reserved share, limit and the
leases that hold capacity. Built from a snapshot, then updated in place as the cycle decides."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter

from respools.model import Form, Lease, PolicySpec, PoolSpec, RequestState, ReservationSpec
from respools.scheduling.placement import DeviceMap, Held, Shape, never_fits, possible_on_empty
from respools.scheduling.validation import pool_capacity
from respools.scheduling.vectors import Vector, add_into


@dataclass(slots=True, eq=False)
class LeaseView:
    """What preemption planning needs of a live lease.

    The grant's facts (everything up to ``max_runtime_s``) never change, so a ``Memory`` keeps one view
    per lease from cycle to cycle; the fields after them are the cycle's own and are set again by
    every ``build_pools``."""

    id: str
    pool: str
    subject: str
    resources: Vector
    borrowed: Vector
    priority: int
    preemptible: bool
    granted_ts: float
    grant_seq: int
    """With ``granted_ts``, the order grants were made (``Lease.grant_seq``)."""
    max_runtime_s: float | None
    preempting: bool = False
    preempted_for: str | None = None
    overdue_since: datetime | None = None
    held: Held = ()
    """The lease's devices resolved on its pool's map (empty on pools without an inventory)."""
    resolved_on: DeviceMap | None = None
    """The map ``held`` was resolved on: still valid while the cycle's pool has that map."""

    @classmethod
    def of(cls, lease: Lease) -> LeaseView:
        # Read through ``__dict__``: pydantic's attribute access costs several times more.
        fields = lease.__dict__
        return cls(
            fields["id"],
            fields["pool"],
            fields["subject"],
            fields["resources"],
            fields["borrowed"],
            fields["priority"],
            fields["preemptible"],
            fields["granted_at"].timestamp(),
            fields["grant_seq"],
            fields["max_runtime_s"],
        )


NAMED_VICTIMS = 5
"""A waiter's reason names at most this many of the leases it waits for."""


def waiting_for(victims: Sequence[LeaseView]) -> str:
    """Why a waiter holds still, naming the leases it waits for (DESIGN §2.8): a waiter whose capacity is
    held by an overdue lease must be able to tell whose workload has not stopped. Stable from one cycle
    to the next (no running clock), so the stored reason is only rewritten when it changes."""
    ids = sorted(lv.id for lv in victims)
    named = ", ".join(ids[:NAMED_VICTIMS]) + (
        f" and {len(ids) - NAMED_VICTIMS} more" if len(ids) > NAMED_VICTIMS else ""
    )
    overdue = sorted((lv.overdue_since, lv.id) for lv in victims if lv.overdue_since is not None)
    noun = "lease" if len(ids) == 1 else f"{len(ids)} leases"
    message = f"waiting for preempted {noun} {named} to be released"
    if overdue:
        since, first = overdue[0]
        who = first if len(overdue) == 1 else f"{len(overdue)} of them ({first} first)"
        message += (
            f"; {who} overdue since {since.isoformat(timespec='seconds')}: the capacity is handed over once "
            "the holder releases it, its backend confirms the workload stopped, or the holder is silent "
            "for a full lease TTL"
        )
    return message


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
    grants: int = 0
    """Bumped whenever the cycle grants this subject a lease: a new lease that may be preempted."""
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


@dataclass(slots=True, eq=False)
class PoolFacts:
    """What a pool's spec alone decides: capacity, forms, the map of its inventory, and what was
    judged of request shapes on it. A ``Memory`` keeps them from cycle to cycle for as long as the
    snapshot hands over the same spec object (specs are values: a changed pool is a new object), so
    that a steady cycle neither maps the inventory again nor judges the same shapes again."""

    spec: PoolSpec
    capacity: Vector
    forms: frozenset[Form]
    devices: DeviceMap | None
    """Occupancy, emptied at the start of every cycle that uses it (``DeviceMap.reset``)."""
    never_fits: dict[Shape, str | None] = field(default_factory=dict)
    """Per device shape, why it could not be placed even on the empty inventory."""
    never_eligible: dict[tuple[object, ...], str | None] = field(default_factory=dict)
    """Per request shape, what rules it out on this pool whoever asks (see ``eligibility``)."""
    empty: DeviceMap | None = None

    @classmethod
    def of(cls, spec: PoolSpec) -> PoolFacts:
        return cls(
            spec=spec,
            capacity=pool_capacity(spec),  # a capacity of 0 meters the key and offers none of it
            forms=frozenset(spec.forms) if spec.forms is not None else frozenset(Form),
            devices=DeviceMap(spec) if spec.inventory is not None else None,
        )

    def placement_impossible(self, shape: Shape) -> str | None:
        if shape not in self.never_fits:
            quick = self.devices.fits_when_empty(shape) if self.devices is not None else None
            if quick is None:  # constrained: try it on a map of the empty inventory
                if self.empty is None:
                    self.empty = DeviceMap(self.spec)
                self.never_fits[shape] = possible_on_empty(self.empty, shape)
            else:
                self.never_fits[shape] = None if quick or not shape.needs_devices else never_fits(shape)
        return self.never_fits[shape]


@dataclass(slots=True)
class PoolState:
    spec: PoolSpec
    name: str
    """``spec.name``, kept as a field: the cycle reads it in its hot loops (a property is a call)."""
    capacity: Vector
    forms: frozenset[Form]
    free: Vector
    held: Vector
    quotas: dict[str, SubjectQuota]
    devices: DeviceMap | None
    windows: dict[str, list[Window]]
    """Reservations per subject that have not ended yet."""
    facts: PoolFacts
    preempting: list[LeaseView] = field(default_factory=list)
    """Leases that were preempting when the cycle began (their waiters are nominated here)."""
    version: int = 0
    """Bumped whenever the cycle changes this pool's accounting (a grant, a preemption, a hold), so
    that what was derived from it can be cached until then (see ``preemption``)."""
    derived: dict[object, object] = field(default_factory=dict)
    derived_version: int = 0
    grown: int = 0
    """Bumped whenever the cycle gives capacity back to the pool (a grant of the cycle withdrawn):
    every other change only takes free capacity and devices away."""
    gains: dict[int, int] = field(default_factory=dict)
    """Per policy priority, how often the cycle gave a subject of it something others may preempt: a
    new lease, or a hold for its nominee that makes it borrow on a key it did not (``Futile``)."""

    def gained(self, quota: SubjectQuota) -> None:
        self.gains[quota.priority] = self.gains.get(quota.priority, 0) + 1

    def placement_impossible(self, shape: Shape) -> str | None:
        return self.facts.placement_impossible(shape)

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


@dataclass(frozen=True, slots=True, eq=False)
class LeaseBooks:
    """A snapshot's live leases already summed per pool and subject, by a caller that keeps them so as
    they are granted and end (``books.KeptLeases``): what ``build_pools`` would sum from the leases, for
    a cycle at a time when no lease has reached its ``expires_at`` (so that none expires or is revoked)."""

    held: dict[str, list[tuple[str, Vector, list[LeaseView]]]]
    """Per pool, per subject with leases there (in the order of its first lease id): its usage, and its
    leases' views in id order; the cycle's own copies."""
    preempting: list[Lease]
    """The leases under notice, in the snapshot's order."""
    leases: Mapping[str, Lease]
    """Every live lease by id (read only: a preempting lease's view and a lease's placement)."""
    views: Mapping[str, LeaseView]
    """Every live lease's view by id."""


@dataclass(eq=False)
class Kept:
    """What the accounting keeps from one cycle to the next (part of ``Memory``, which holds it here so
    that this module needs nothing of the memory's: the package reads one way)."""

    pools: dict[str, PoolFacts] = field(default_factory=dict)
    """What each pool's spec alone decides (``PoolFacts``), while the snapshot has the same spec."""
    leases: dict[str, LeaseView] = field(default_factory=dict)
    """A view per live lease, its grant's facts and its devices resolved on its pool's map."""


def build_pools(
    now: datetime,
    pools: Sequence[PoolSpec],
    policies: Sequence[PolicySpec],
    reservations: Sequence[ReservationSpec],
    leases: Sequence[Lease],
    memory: Kept | None = None,
    books: LeaseBooks | None = None,
) -> dict[str, PoolState]:
    """The accounting of every pool at ``now``. With a ``memory``, what follows from a pool's spec or
    a lease's grant alone is taken from the cycles before, and kept for the ones after. With ``books``,
    the leases are taken as summed there, and ``leases`` is not read."""
    now_ts = now.timestamp()
    kept_pools = memory.pools if memory is not None else {}
    states: dict[str, PoolState] = {}
    for pool in sorted(pools, key=lambda p: p.name):
        facts = kept_pools.get(pool.name)
        if facts is None or facts.spec is not pool:
            facts = PoolFacts.of(pool)
            if memory is not None:
                kept_pools[pool.name] = facts
        elif facts.devices is not None:
            facts.devices.reset()
        states[pool.name] = PoolState(
            spec=pool,
            name=pool.name,
            capacity=facts.capacity,
            forms=facts.forms,
            free=dict(facts.capacity),
            held={},
            quotas={},
            devices=facts.devices,
            windows={},
            facts=facts,
        )
    if memory is not None and len(kept_pools) > len(states):
        for name in [name for name in kept_pools if name not in states]:
            del kept_pools[name]
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
    if books is None:
        _account_leases(states, sorted(leases, key=attrgetter("id")), memory)
    else:
        _account_books(states, books)
    return states


def _account_leases(states: dict[str, PoolState], leases: list[Lease], memory: Kept | None) -> None:
    """Charge every live lease to its subject and pool and occupy its devices. This runs for every
    lease in every cycle, so it reads each lease's mutable fields only (its state and who preempted
    it) when the memory already knows the lease."""
    known = memory.leases if memory is not None else {}
    preempting_state = RequestState.PREEMPTING  # an enum member's lookup costs more than the comparison
    for lease in leases:
        fields = lease.__dict__
        view = known.get(fields["id"])
        if view is None:
            view = LeaseView.of(lease)
            if memory is not None:
                known[view.id] = view
        state = states.get(view.pool)
        if state is None:
            continue
        preempting = fields["state"] == preempting_state
        view.preempting = preempting
        view.preempted_for = fields["preempted_for"]
        view.overdue_since = fields["overdue_since"]
        quota = state.quotas.get(view.subject) or _quota(state, view.subject)
        usage, free = quota.usage, state.free
        resources = view.resources
        for key, amount in resources.items():
            usage[key] = usage.get(key, 0) + amount
            if key in free:
                free[key] -= amount
        quota.leases.append(view)
        if preempting:
            add_into(quota.leaving, resources)
            state.preempting.append(view)
        devices = state.devices
        if devices is not None:
            if view.resolved_on is not devices:
                view.held, view.resolved_on = devices.resolve(fields["placement"]), devices
            devices.apply(view.held)
    if memory is not None and len(known) > 2 * len(leases) + 1024:
        memory.leases = {lease.__dict__["id"]: known[lease.__dict__["id"]] for lease in leases}


def _account_books(states: dict[str, PoolState], books: LeaseBooks) -> None:
    """``_account_leases`` from sums kept as the leases came and went: per subject and pool rather
    than per lease, but for the leases under notice, which are few, and the devices of pools with an
    inventory. The same accounting: integer sums, subjects met in the same order, leases in id order."""
    for pool, held in books.held.items():
        state = states.get(pool)
        if state is None:
            continue
        free = state.free
        for subject, usage, views in held:
            quota = state.quotas.get(subject) or _quota(state, subject)
            quota.usage, quota.leases = usage, views
            for key, amount in usage.items():
                if key in free:
                    free[key] -= amount
        devices = state.devices
        if devices is not None:
            for view in sorted((view for _, _, views in held for view in views), key=attrgetter("id")):
                if view.resolved_on is not devices:
                    placement = books.leases[view.id].__dict__["placement"]
                    view.held, view.resolved_on = devices.resolve(placement), devices
                devices.apply(view.held)
    for lease in sorted(books.preempting, key=attrgetter("id")):
        fields = lease.__dict__
        view = books.views[fields["id"]]
        state = states.get(view.pool)
        if state is None:
            continue
        view.preempting = True
        view.preempted_for = fields["preempted_for"]
        view.overdue_since = fields["overdue_since"]
        add_into(state.quotas[view.subject].leaving, view.resources)
        state.preempting.append(view)


def _quota(state: PoolState, subject: str) -> SubjectQuota:
    """A subject that holds a lease or a reservation without a policy (the policy was deleted since)
    still has usage to account for; it gets no reserved share of its own."""
    quota = state.quotas.get(subject)
    if quota is None:
        quota = SubjectQuota(subject, priority=0, weight=1.0, policy_reserved={}, reserved={}, limit={})
        state.quotas[subject] = quota
    return quota

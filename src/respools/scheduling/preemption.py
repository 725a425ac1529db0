"""DESIGN §2.5: who may be preempted for a waiter, and the minimal set of victims.

Candidates are other subjects' leases that sit on borrowed capacity (reclaim, policy priority, fair
share) before the waiter's own leases of lower request priority; within that, lowest priority first,
then the most recently granted. Victims are taken greedily until the waiter fits, then walked back
from the last one chosen, dropping every victim whose release turns out not to be needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from respools.model import GPU, PreemptReason, is_mig_key
from respools.scheduling.fit import quota_miss
from respools.scheduling.placement import Freed, HostSlots, Shape, freed
from respools.scheduling.requests import RequestView
from respools.scheduling.state import LeaseView, PoolState, SubjectQuota
from respools.scheduling.vectors import Vector, add_into

Basis = tuple[frozenset[str], bool, bool]
"""What selection starts from, as far as a ``Futile`` needs it: the keys the waiter comes short on, and
whether it was within its limit and its reserved share (``_basis``)."""


@dataclass(slots=True, eq=False)  # identity: the trial takes candidates out of a list by identity
class Candidate:
    order: tuple[int, int, int, float, int, str]
    lease: LeaseView
    why: PreemptReason
    own: bool


@dataclass(frozen=True, slots=True)
class Plan:
    victims: tuple[LeaseView, ...]
    reason: PreemptReason


@dataclass(slots=True)  # not frozen: one per failed planning, and a frozen init costs twice as much
class Futile:
    """Planning for a waiter found no victims in a way that only some changes to the pool can undo:
    there was no candidate, or releasing every candidate would not make it fit. Less free capacity,
    fewer free devices and fewer candidates keep it so. What can undo it: a grant to the waiter's
    subject or a change of what selection starts from (``_basis``: the keys it comes short on, whose
    borrowers become candidates; whether it is within its limit and reserved share), capacity given
    back to the pool, or a gain (``PoolState.gains``) of a subject it may take from. While none of
    these happened, planning again finds nothing again (``holds``), and the cycle need not plan again
    for a failed group when something else in its pool changed."""

    grants: int
    grown: int
    gains: int
    basis: Basis

    def holds(self, pool: PoolState, quota: SubjectQuota, rv: RequestView) -> bool:
        if self.grants != quota.grants or self.grown != pool.grown:
            return False
        short, within_limit, reclaim, _ = _basis(pool, quota, rv, True, _victims(quota).below(rv.priority)[1])
        if (short, within_limit, reclaim) != self.basis:
            return False
        return self.gains == _gains(pool, quota, rv, within_limit, reclaim)


def plan_preemption(pool: PoolState, quota: SubjectQuota, rv: RequestView) -> Plan | Futile | None:
    """The minimal set of victims for ``rv`` on ``pool``; else why there is none, as a ``Futile``
    where only some changes can undo it (None where any change might)."""
    return _plan(pool, quota, rv, may_reclaim=True)


def _plan(pool: PoolState, quota: SubjectQuota, rv: RequestView, may_reclaim: bool) -> Plan | Futile | None:
    """A set taken by reclaim that keeps some of the waiter's own victims may leave its subject above
    its reserved share after all: the waiter is then planned again as one that may not reclaim (other
    reasons, its own leases)."""
    selection = _select(pool, quota, rv, may_reclaim)
    if selection.empty or not _could_fit(pool, quota, rv, selection):
        return _futile(pool, quota, rv, selection) if may_reclaim else None
    if selection.reclaim_needs_own and selection.others and _others_suffice(pool, quota, rv, selection):
        # The greedy pass would stop before any own victim, and the set would fail ``_reclaim_holds``.
        return _plan(pool, quota, rv, may_reclaim=False)
    candidates = selection.candidates(quota)
    trial = _Trial(pool, quota, rv)
    try:
        chosen = trial.choose(candidates)
    finally:
        trial.restore()
    if chosen is None:
        return None
    if not _reclaim_holds(pool, quota, rv, chosen):
        return _plan(pool, quota, rv, may_reclaim=False)
    others = [c for c in chosen if not c.own]
    reason = others[0].why if others else PreemptReason.PRIORITY
    if reason is PreemptReason.RECLAIM and _leans_on_reservation(pool, quota, rv, chosen):
        reason = PreemptReason.RESERVATION
    return Plan(tuple(c.lease for c in chosen), reason)


def _futile(pool: PoolState, quota: SubjectQuota, rv: RequestView, selection: _Selection) -> Futile:
    basis = selection.basis
    return Futile(quota.grants, pool.grown, _gains(pool, quota, rv, basis[1], basis[2]), basis)


def _gains(pool: PoolState, quota: SubjectQuota, rv: RequestView, within_limit: bool, reclaim: bool) -> int:
    """The gains so far of the subjects whose leases the waiter may take (``_others``): all of them for
    reclaim, else those of lower policy priority (and equal, with fair share); none beyond its limit.
    Counts only grow, so an equal sum means none of them gained."""
    if not within_limit:
        return 0
    gains = pool.gains
    if reclaim or not gains:
        return sum(gains.values())
    priority, fair = quota.priority, pool.spec.fair_share_preemption and rv.preemptible
    total = 0
    for p, n in gains.items():  # a loop, not a generator: stamped at every failed planning
        if p < priority or (fair and p == priority):
            total += n
    return total


def _borrowing(quota: SubjectQuota, keys: frozenset[str]) -> frozenset[str]:
    """The keys of ``keys`` the subject borrows on, judged on ``quota.effective()``."""
    usage, incoming, leaving, reserved = quota.usage, quota.incoming, quota.leaving, quota.reserved
    return frozenset([k for k in keys if usage.get(k, 0) - leaving.get(k, 0) + incoming.get(k, 0) > reserved.get(k, 0)])


def _could_fit(pool: PoolState, quota: SubjectQuota, rv: RequestView, selection: _Selection) -> bool:
    """Whether the waiter could fit even if every candidate went, in the books and on the devices:
    most waiters that cannot preempt are told so here, in one check rather than one per candidate,
    and the books alone, from totals kept per subject, settle most of them."""
    if quota_miss(pool, quota, rv, selection.released, selection.own_released) is not None:
        return False
    devices, shape = pool.devices, rv.shape
    if devices is None or not shape.needs_devices or _fits_now(pool, shape):
        return True
    # A subject's look-alike groups ask again with the same selection and shape (one signature
    # preemptible, one not): the answer holds until the pool changes.
    cache = pool.cache()
    key = (_could_fit, selection.key, shape)
    fits = cache.get(key)
    if fits is None:
        fits = cache[key] = devices.fits_released(shape, selection.freed(quota))
    return cast(bool, fits)


def _others_suffice(pool: PoolState, quota: SubjectQuota, rv: RequestView, selection: _Selection) -> bool:
    """Whether the other subjects' candidates alone would make the waiter fit (books and devices)."""
    if quota_miss(pool, quota, rv, selection.others_released) is not None:
        return False
    devices, shape = pool.devices, rv.shape
    if devices is None or not shape.needs_devices or _fits_now(pool, shape):
        return True
    # The other subjects' candidates depend on the selection's key but not on the request priority:
    # the answer holds for every look-alike of the subject until the pool changes (as ``_could_fit``).
    cache = pool.cache()
    key = (_others_suffice, selection.key[:-1], shape)
    fits = cache.get(key)
    if fits is None:
        fits = cache[key] = devices.fits_released(shape, selection.others_freed())
    return cast(bool, fits)


def _fits_now(pool: PoolState, shape: Shape) -> bool:
    """Whether the shape fits the pool's map as it is, once per pool state and shape."""
    cache = pool.cache()
    fits = cache.get((_fits_now, shape))
    if fits is None:
        assert pool.devices is not None
        fits = cache[(_fits_now, shape)] = pool.devices.fits(shape)
    return cast(bool, fits)


class _Trial:
    """Victims released one at a time, in the books and on the device map, so that each step of the
    greedy pass and of the fill-back costs one lease, not the whole set chosen so far."""

    def __init__(self, pool: PoolState, quota: SubjectQuota, rv: RequestView) -> None:
        self.pool, self.quota, self.rv = pool, quota, rv
        self.devices = pool.devices if pool.devices is not None and rv.shape.needs_devices else None
        self.released: Vector = {}
        self.own: Vector = {}
        self.out: list[Candidate] = []
        self.hosts: dict[str, HostSlots] | None = None
        """Where a shape of one replica that does not fit now may fit: on the hosts something was
        released on so far (kept as candidates are taken, not built again at every step; a gang
        looks at every host, None)."""
        if self.devices is not None and rv.shape.replicas == 1 and not _fits_now(pool, rv.shape):
            self.hosts = {}

    def choose(self, candidates: list[Candidate]) -> list[Candidate] | None:
        chosen: list[Candidate] = []
        for candidate in candidates:
            if candidate.why is PreemptReason.FAIR_SHARE and not _fair(
                self.pool, self.quota, self.rv, [*chosen, candidate]
            ):
                continue
            chosen.append(candidate)
            self._release(candidate, 1)
            if self._fits():
                break
        else:
            return None
        for index in range(len(chosen) - 1, -1, -1):
            kept = chosen[index]
            self._release(kept, -1)
            if len(chosen) > 1 and self._fits():
                chosen.pop(index)
            else:
                self._release(kept, 1)
        return chosen

    def _release(self, candidate: Candidate, sign: int) -> None:
        add_into(self.released, candidate.lease.resources, sign)
        if candidate.own:
            add_into(self.own, candidate.lease.resources, sign)
        if self.devices is not None:
            self.devices.apply(candidate.lease.held, -sign)
            if sign > 0 and self.hosts is not None:
                hosts = self.hosts  # kept when put back: looking too wide is harmless
                for _, host, _, _, _ in candidate.lease.held:
                    hosts[host.name] = host
        if sign > 0:
            self.out.append(candidate)
        else:
            self.out.remove(candidate)

    def _fits(self) -> bool:
        """The books first, which is cheap, then the devices."""
        if quota_miss(self.pool, self.quota, self.rv, self.released, self.own) is not None:
            return False
        if self.devices is None:
            return True
        return self.devices.fits(self.rv.shape, None if self.hosts is None else self.hosts.values())

    def restore(self) -> None:
        if self.devices is not None:
            for candidate in self.out:
                self.devices.apply(candidate.lease.held)


@dataclass(slots=True)
class _Victims:
    """A subject's leases that may be taken, in victim order (lowest request priority first, then the
    most recently granted), cached on the subject's quota until its standing changes (``_victims``): a
    long queue asks for them once per failing group, and they rarely change within a cycle."""

    effective: Vector
    leases: list[LeaseView]
    by_keys: dict[frozenset[str], tuple[list[LeaseView], Vector]]
    by_priority: dict[int, tuple[list[LeaseView], Vector]]
    freed_by: dict[int, tuple[list[LeaseView], Freed]] = field(default_factory=dict)
    """Per list of these leases (by identity, the list kept with it), what it frees on the map."""

    def freed(self, leases: list[LeaseView]) -> Freed:
        """What releasing ``leases`` frees on the map: summed once, asked by every waiter that may take them."""
        found = self.freed_by.get(id(leases))
        if found is None:
            found = self.freed_by[id(leases)] = (leases, freed(lv.held for lv in leases))
        return found[1]

    def below(self, priority: int) -> tuple[list[LeaseView], Vector]:
        """The leases of lower request priority than ``priority``, and what they hold in all."""
        found = self.by_priority.get(priority)
        if found is None:
            leases = [lv for lv in self.leases if lv.priority < priority]
            found = self.by_priority[priority] = (leases, _total(leases))
        return found

    def borrowing_on(self, keys: frozenset[str]) -> tuple[list[LeaseView], Vector]:
        """The leases that borrow on one of ``keys``, and what they hold in all."""
        found = self.by_keys.get(keys)
        if found is None:
            if len(keys) == 1:  # the common case, without a generator per lease
                (key,) = keys
                leases = [lv for lv in self.leases if lv.borrowed.get(key, 0) > 0]
            else:
                leases = [lv for lv in self.leases if any(lv.borrowed.get(k, 0) > 0 for k in keys)]
            found = self.by_keys[keys] = (leases, _total(leases))
        return found


def _total(leases: list[LeaseView]) -> Vector:
    total: Vector = {}
    for lv in leases:
        for key, amount in lv.resources.items():  # ``add_into``, inlined: this runs per lease
            total[key] = total.get(key, 0) + amount
    return total


def _victims(quota: SubjectQuota) -> _Victims:
    """Cached on the quota until its own accounting changes (not the pool's: in a preemption storm
    the pool changes at every decision, while most subjects do not)."""
    if quota.victims is None or quota.victims[0] != quota.version:
        leases = sorted(
            (lv for lv in quota.leases if lv.preemptible and not lv.preempting),
            key=lambda lv: (lv.priority, -lv.granted_ts, -lv.grant_seq, lv.id),
        )
        quota.victims = (quota.version, _Victims(quota.effective(), leases, {}, {}))
    return cast(_Victims, quota.victims[1])


Taken = list[tuple[SubjectQuota, PreemptReason, list[LeaseView]]]
"""Per other subject: why it may be preempted, and which of its leases."""
_Others = tuple[Taken, Vector]


@dataclass(slots=True)
class _Selection:
    """Who may be preempted for one waiter, as lists per subject, with the totals they would release."""

    others: Taken
    own: list[LeaseView]
    released: Vector
    own_released: Vector
    key: tuple[object, ...]
    """What the selection was made from (the waiter's subject, its standing and its request priority):
    within one state of the pool, equal keys select the same leases."""
    basis: Basis
    """The part of ``_basis`` that a ``Futile`` is stamped with."""
    others_released: Vector
    reclaim_needs_own: bool
    """Reclaim was allowed only with the waiter's own candidates counted as released."""

    @property
    def empty(self) -> bool:
        return not self.others and not self.own

    def others_freed(self) -> list[Freed]:
        """What the other subjects' candidates free on the pool's map, list by list."""
        return [_victims(other).freed(leases) for other, _, leases in self.others]

    def freed(self, quota: SubjectQuota) -> list[Freed]:
        """What every candidate frees on the pool's map (``quota`` is the waiter's), list by list."""
        return [*self.others_freed(), _victims(quota).freed(self.own)]

    def candidates(self, quota: SubjectQuota) -> list[Candidate]:
        out = [
            Candidate((0, other.priority, lv.priority, -lv.granted_ts, -lv.grant_seq, lv.id), lv, why, False)
            for other, why, leases in self.others
            for lv in leases
        ]
        out.extend(
            Candidate(
                (1, quota.priority, lv.priority, -lv.granted_ts, -lv.grant_seq, lv.id), lv, PreemptReason.PRIORITY, True
            )
            for lv in self.own
        )
        out.sort(key=lambda c: c.order)
        return out


def _select(pool: PoolState, quota: SubjectQuota, rv: RequestView, may_reclaim: bool) -> _Selection:
    """Other subjects' leases on borrowed capacity that the waiter may reclaim, or preempt by policy
    priority or fair share; then the waiter's own leases of lower request priority."""
    own, own_released = _victims(quota).below(rv.priority)
    short, within_limit, reclaim, without_own = _basis(pool, quota, rv, may_reclaim, own_released)
    fair = pool.spec.fair_share_preemption and rv.preemptible
    # The same for every waiter of this subject that comes short on the same keys, until the pool changes.
    key = (_Selection, quota.subject, short, within_limit, reclaim, fair)
    cache = pool.cache()
    found = cache.get(key)
    if found is None:
        found = cache[key] = _others(pool, quota, short, within_limit, reclaim, fair)
    others, others_release = cast(_Others, found)
    basis = (short, within_limit, reclaim)
    if not others and not own:
        return _Selection(others, own, {}, own_released, (*key[1:], rv.priority), basis, others_release, False)
    released = dict(others_release)
    add_into(released, own_released)
    return _Selection(
        others,
        own,
        released,
        own_released,
        (*key[1:], rv.priority),
        basis,
        others_release,
        reclaim and not without_own,
    )


def _basis(
    pool: PoolState, quota: SubjectQuota, rv: RequestView, may_reclaim: bool, own_released: Vector
) -> tuple[frozenset[str], bool, bool, bool]:
    """What selection starts from: the keys the waiter comes short on (whose borrowers are candidates),
    whether it stays within its limit with its own candidates gone, whether it may reclaim, and
    whether reclaim needs none of its own candidates gone. ``own_released``: what the waiter's own
    candidates hold (``_Victims.below``)."""
    capacity, free, usage, reserved = pool.capacity, pool.free, quota.usage, quota.reserved
    # Reclaim counts what this cycle already granted (in usage) or nominated (incoming) for the subject
    # as used, and its own possible victims as released; ``_reclaim_holds`` checks the victims chosen.
    incoming, leaving = quota.incoming, quota.leaving  # ``quota.effective()`` per key, without a new dict
    limit = quota.limit  # ``quota.limit_of``, inlined
    short_keys = []
    within_limit, reclaim, without_own = True, may_reclaim, True
    for k, a in rv.demand.items():
        cap = capacity.get(k)
        if cap is None:
            continue
        if free.get(k, 0) < a:
            short_keys.append(k)
        used = usage.get(k, 0) + incoming.get(k, 0)
        own = own_released.get(k, 0)
        if used - own + a > (cap if limit is None else limit.get(k, cap)):  # the trial checks the set chosen
            within_limit = False
        kept = used - leaving.get(k, 0) + a - reserved.get(k, 0)
        if kept - own > 0:
            reclaim = False
        elif kept > 0:
            without_own = False
    # Nothing short in the books but no device fits: free devices.
    short = frozenset(short_keys or [k for k in rv.demand if k == GPU or is_mig_key(k)])
    return short, within_limit, reclaim, without_own


def _others(
    pool: PoolState, quota: SubjectQuota, short: frozenset[str], within_limit: bool, reclaim: bool, fair: bool
) -> tuple[Taken, Vector]:
    others: Taken = []
    released: Vector = {}
    if not within_limit:
        return others, released
    for other, leases, total in _borrowers(pool, short):
        if other is quota:
            continue
        if reclaim:
            why = PreemptReason.RECLAIM
        elif quota.priority > other.priority:
            why = PreemptReason.PRIORITY
        elif fair and quota.priority == other.priority:
            why = PreemptReason.FAIR_SHARE
        else:
            continue
        others.append((other, why, leases))
        add_into(released, total)
    return others, released


Borrowers = list[tuple[SubjectQuota, list[LeaseView], Vector]]


def _borrowers(pool: PoolState, short: frozenset[str]) -> Borrowers:
    """The subjects that borrow on one of the ``short`` keys, with their leases that do and what those
    hold: the same for every waiter that comes short on these keys until the pool changes, while which
    of them a waiter may take depends on the waiter."""
    cache = pool.cache()
    found = cache.get((_borrowers, short))
    if found is None:
        borrowers: Borrowers = []
        for other in pool.quotas.values():
            if not other.leases:
                continue
            borrowing = _borrowing(other, short)  # before its victims, which are sorted for the subjects that do
            if not borrowing:
                continue
            leases, total = _victims(other).borrowing_on(borrowing)
            if leases:
                borrowers.append((other, leases, total))
        found = cache[(_borrowers, short)] = borrowers
    return cast(Borrowers, found)


def _fair(pool: PoolState, quota: SubjectQuota, rv: RequestView, chosen: list[Candidate]) -> bool:
    """Kueue's rule: the preemptor's share after the grant stays ≤ each victim subject's share after
    its loss, so the two can never take capacity back and forth."""
    after = quota.effective()
    for c in chosen:
        if c.own:
            add_into(after, c.lease.resources, -1)
    add_into(after, rv.demand)
    mine = quota.share(pool.capacity, after)
    losses: dict[str, Vector] = {}
    for c in chosen:
        if c.why is PreemptReason.FAIR_SHARE:
            add_into(losses.setdefault(c.lease.subject, {}), c.lease.resources)
    for subject, lost in losses.items():
        victim = pool.quotas[subject]
        remaining = victim.effective()
        add_into(remaining, lost, -1)
        if mine > victim.share(pool.capacity, remaining):
            return False
    return True


def _reclaim_holds(pool: PoolState, quota: SubjectQuota, rv: RequestView, chosen: list[Candidate]) -> bool:
    """DESIGN §2.5 reclaim with the victims actually chosen: the subject stays within its reserved
    share after the grant, its own victims counted as released. The selection allowed reclaim on all
    of its own candidates going; a minimal set that keeps some of them may no longer be entitled."""
    if not any(c.why is PreemptReason.RECLAIM for c in chosen):
        return True
    after = quota.effective()
    for c in chosen:
        if c.own:
            add_into(after, c.lease.resources, -1)
    add_into(after, rv.demand)
    return all(after.get(k, 0) <= quota.reserved.get(k, 0) for k in rv.demand if k in pool.capacity)


def _leans_on_reservation(pool: PoolState, quota: SubjectQuota, rv: RequestView, chosen: list[Candidate]) -> bool:
    """Whether the reclaim needs a reservation's share on top of the policy's (own victims released)."""
    after = quota.effective()
    for c in chosen:
        if c.own:
            add_into(after, c.lease.resources, -1)
    return any(
        after.get(k, 0) + a > quota.policy_reserved.get(k, 0) for k, a in rv.demand.items() if k in pool.capacity
    )

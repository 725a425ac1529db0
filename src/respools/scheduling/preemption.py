"""DESIGN §2.5: who may be preempted for a waiter, and the minimal set of victims.

Candidates are other subjects' leases that sit on borrowed capacity (reclaim, policy priority, fair
share) before the waiter's own leases of lower request priority; within that, lowest priority first,
then the most recently granted. Victims are taken greedily until the waiter fits, then walked back
from the last one chosen, dropping every victim whose release turns out not to be needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from respools.model import GPU, PreemptReason, is_mig_key
from respools.scheduling.fit import quota_miss
from respools.scheduling.requests import RequestView
from respools.scheduling.state import LeaseView, PoolState, SubjectQuota
from respools.scheduling.vectors import Vector, add_into


@dataclass(frozen=True, slots=True)
class Candidate:
    order: tuple[int, int, int, float, str]
    lease: LeaseView
    why: PreemptReason
    own: bool


@dataclass(frozen=True, slots=True)
class Plan:
    victims: tuple[LeaseView, ...]
    reason: PreemptReason


def plan_preemption(pool: PoolState, quota: SubjectQuota, rv: RequestView) -> Plan | None:
    candidates = _candidates(pool, quota, rv)
    if not candidates or not _could_fit(pool, quota, rv, candidates):
        return None
    trial = _Trial(pool, quota, rv)
    try:
        chosen = trial.choose(candidates)
    finally:
        trial.restore()
    if chosen is None:
        return None
    others = [c for c in chosen if not c.own]
    reason = others[0].why if others else PreemptReason.PRIORITY
    if reason is PreemptReason.RECLAIM and _leans_on_reservation(pool, quota, rv):
        reason = PreemptReason.RESERVATION
    return Plan(tuple(c.lease for c in chosen), reason)


def _could_fit(pool: PoolState, quota: SubjectQuota, rv: RequestView, candidates: list[Candidate]) -> bool:
    """Whether the waiter could fit even if every candidate went, in the books and on the devices:
    most waiters that cannot preempt are told so here, in one check rather than one per candidate."""
    released: Vector = {}
    own: Vector = {}
    for candidate in candidates:
        add_into(released, candidate.lease.resources)
        if candidate.own:
            add_into(own, candidate.lease.resources)
    if quota_miss(pool, quota, rv, released, own) is not None:
        return False
    if pool.devices is None or not rv.shape.needs_devices:
        return True
    placements = [c.lease.lease.placement for c in candidates]
    pool.devices.release_all(placements)
    try:
        return pool.devices.place(rv.shape) is not None
    finally:
        for placement in placements:
            pool.devices.occupy(placement)


class _Trial:
    """Victims released one at a time, in the books and on the device map, so that each step of the
    greedy pass and of the fill-back costs one lease, not the whole set chosen so far."""

    def __init__(self, pool: PoolState, quota: SubjectQuota, rv: RequestView) -> None:
        self.pool, self.quota, self.rv = pool, quota, rv
        self.devices = pool.devices if pool.devices is not None and rv.shape.needs_devices else None
        self.released: Vector = {}
        self.own: Vector = {}
        self.out: list[Candidate] = []

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
            self.devices.occupy(candidate.lease.lease.placement, -sign)
        if sign > 0:
            self.out.append(candidate)
        else:
            self.out.remove(candidate)

    def _fits(self) -> bool:
        """The books first, which is cheap, then the devices."""
        if quota_miss(self.pool, self.quota, self.rv, self.released, self.own) is not None:
            return False
        return self.devices is None or self.devices.place(self.rv.shape) is not None

    def restore(self) -> None:
        if self.devices is not None:
            for candidate in self.out:
                self.devices.occupy(candidate.lease.lease.placement)


def _candidates(pool: PoolState, quota: SubjectQuota, rv: RequestView) -> list[Candidate]:
    demand = rv.demand
    capacity = pool.capacity
    short = {k for k, a in demand.items() if k in capacity and pool.free.get(k, 0) < a}
    if not short:  # the quota fits but no device does: free devices
        short = {k for k in demand if k == GPU or is_mig_key(k)}
    within_limit = all(
        quota.usage.get(k, 0) + a <= quota.limit_of(k, capacity[k]) for k, a in demand.items() if k in capacity
    )
    reclaim = all(quota.usage.get(k, 0) + a <= quota.reserved.get(k, 0) for k, a in demand.items() if k in capacity)
    out: list[Candidate] = []
    if within_limit:
        for other in pool.quotas.values():
            if other is quota:
                continue
            if reclaim:
                why = PreemptReason.RECLAIM
            elif quota.priority > other.priority:
                why = PreemptReason.PRIORITY
            elif pool.spec.fair_share_preemption and rv.preemptible and quota.priority == other.priority:
                why = PreemptReason.FAIR_SHARE
            else:
                continue
            if not other.leases:
                continue
            effective = other.effective()
            borrowing = [k for k in short if effective.get(k, 0) > other.reserved.get(k, 0)]
            if not borrowing:
                continue
            for lease in other.leases:
                if lease.preemptible and not lease.preempting and any(lease.borrowed.get(k, 0) > 0 for k in borrowing):
                    order = (0, other.priority, lease.priority, -lease.granted_ts, lease.id)
                    out.append(Candidate(order, lease, why, own=False))
    for lease in quota.leases:
        if lease.preemptible and not lease.preempting and lease.priority < rv.priority:
            order = (1, quota.priority, lease.priority, -lease.granted_ts, lease.id)
            out.append(Candidate(order, lease, PreemptReason.PRIORITY, own=True))
    out.sort(key=lambda c: c.order)
    return out


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


def _leans_on_reservation(pool: PoolState, quota: SubjectQuota, rv: RequestView) -> bool:
    return any(
        quota.usage.get(k, 0) + a > quota.policy_reserved.get(k, 0) for k, a in rv.demand.items() if k in pool.capacity
    )

"""DESIGN §2.5: who may be preempted for a waiter, and the minimal set of victims.

Candidates are other subjects' leases that sit on borrowed capacity (reclaim, policy priority, fair
share) before the waiter's own leases of lower request priority; within that, lowest priority first,
then the most recently granted. Victims are taken greedily until the waiter fits, then walked back
from the last one chosen, dropping every victim whose release turns out not to be needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from respools.model import GPU, PreemptReason, is_mig_key
from respools.scheduling.fit import quota_shortfall
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
    if not candidates:
        return None
    chosen: list[Candidate] = []
    for candidate in candidates:
        if candidate.why is PreemptReason.FAIR_SHARE and not _fair(pool, quota, rv, [*chosen, candidate]):
            continue
        chosen.append(candidate)
        if _fits_after(pool, quota, rv, chosen):
            break
    else:
        return None
    for index in range(len(chosen) - 1, -1, -1):
        trial = chosen[:index] + chosen[index + 1 :]
        if trial and _fits_after(pool, quota, rv, trial):
            chosen = trial
    others = [c for c in chosen if not c.own]
    reason = others[0].why if others else PreemptReason.PRIORITY
    if reason is PreemptReason.RECLAIM and _leans_on_reservation(pool, quota, rv):
        reason = PreemptReason.RESERVATION
    return Plan(tuple(c.lease for c in chosen), reason)


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
            effective = other.effective()
            borrowing = [k for k in short if effective.get(k, 0) > other.reserved.get(k, 0)]
            if not borrowing:
                continue
            if reclaim:
                why = PreemptReason.RECLAIM
            elif quota.priority > other.priority:
                why = PreemptReason.PRIORITY
            elif pool.spec.fair_share_preemption and rv.preemptible and quota.priority == other.priority:
                why = PreemptReason.FAIR_SHARE
            else:
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


def _released(chosen: list[Candidate]) -> tuple[Vector, Vector]:
    released: Vector = {}
    own: Vector = {}
    for c in chosen:
        add_into(released, c.lease.resources)
        if c.own:
            add_into(own, c.lease.resources)
    return released, own


def _fits_after(pool: PoolState, quota: SubjectQuota, rv: RequestView, chosen: list[Candidate]) -> bool:
    released, own = _released(chosen)
    if quota_shortfall(pool, quota, rv, released, own) is not None:
        return False
    if pool.devices is None or not rv.shape.needs_devices:
        return True
    placements = [c.lease.lease.placement for c in chosen]
    pool.devices.release_all(placements)
    try:
        return pool.devices.place(rv.shape) is not None
    finally:
        for placement in placements:
            pool.devices.occupy(placement)


def _fair(pool: PoolState, quota: SubjectQuota, rv: RequestView, chosen: list[Candidate]) -> bool:
    """Kueue's rule: the preemptor's share after the grant stays ≤ each victim subject's share after
    its loss, so the two can never take capacity back and forth."""
    _, own = _released(chosen)
    after = quota.effective()
    add_into(after, own, -1)
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

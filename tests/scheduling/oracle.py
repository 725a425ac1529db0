"""A deliberately simple, slow model of DESIGN §2 for pools without a device inventory, written from
the text: plain loops over every request, lease and subject, nothing grouped, cached or remembered.
``test_oracle.py`` requires the core to decide exactly as this does.

Readings of the text it follows (each pinned in docs/decisions.md): requests for 0 of a key ask for
nothing; what a cycle holds for a subject's nominated waiters counts as that subject's use; a
same-cycle grant chosen as a victim is withdrawn, and a waiter that only such grants were in the way
of is granted at once, what they freed beyond its demand held for the rest of the cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from respools.model import STEP_RUN, UNBOUNDED_WHEN_UNMETERED, PreemptReason, Request, RequestState
from respools.scheduling import Snapshot

Vec = dict[str, int]


@dataclass
class Held:
    """A lease as the oracle sees it: one that the store holds, or one granted earlier this cycle."""

    id: str
    subject: str
    resources: Vec
    borrowed: Vec
    priority: int
    preemptible: bool
    ts: float
    seq: int
    preempting: bool = False
    fresh: bool = False


@dataclass
class Standing:
    priority: int
    weight: float
    reserved: Vec
    limit: Vec | None
    usage: Vec = field(default_factory=dict)
    leaving: Vec = field(default_factory=dict)
    incoming: Vec = field(default_factory=dict)


@dataclass
class Pool:
    name: str
    capacity: Vec
    fair: bool
    free: Vec
    held: Vec
    subjects: dict[str, Standing]
    leases: list[Held]


@dataclass
class Outcome:
    grants: list[tuple[str, str, Vec, Vec]] = field(default_factory=list)
    rejects: set[str] = field(default_factory=set)
    preemptions: list[tuple[str, str, tuple[str, ...], str]] = field(default_factory=list)


def get(v: Vec, k: str) -> int:
    return v.get(k, 0)


def plus(a: Vec, b: Vec, sign: int = 1) -> Vec:
    out = dict(a)
    for k, x in b.items():
        out[k] = out.get(k, 0) + sign * x
    return out


def demand_of(request: Request) -> Vec:
    out = {k: v for k, v in request.resources.items() if v}
    out[STEP_RUN] = request.resources.get(STEP_RUN, 1)
    return out


def effective(s: Standing) -> Vec:
    return plus(plus(s.usage, s.leaving, -1), s.incoming)


def share(pool: Pool, s: Standing, used: Vec) -> float:
    dominant = 0.0
    for k, cap in pool.capacity.items():
        borrowed = get(used, k) - get(s.reserved, k)
        if borrowed > 0 and cap > 0:
            dominant = max(dominant, borrowed / cap)
    if dominant == 0.0:
        return 0.0
    return math.inf if s.weight == 0 else dominant / s.weight


class Oracle:
    def __init__(self, snapshot: Snapshot) -> None:
        self.now = snapshot.now.timestamp()
        self.out = Outcome()
        self.seq = 0
        self.pools: dict[str, Pool] = {}
        for spec in snapshot.pools:
            capacity = dict(spec.capacity)
            self.pools[spec.name] = Pool(spec.name, capacity, spec.fair_share_preemption, dict(capacity), {}, {}, [])
        self.policies = snapshot.policies
        for policy in snapshot.policies:
            limit = dict(policy.limit) if policy.limit is not None else None
            self.pools[policy.pool].subjects[policy.subject] = Standing(
                policy.priority, policy.weight, dict(policy.reserved), limit
            )
        for lease in snapshot.leases:
            pool = self.pools[lease.pool]
            s = pool.subjects[lease.subject]
            preempting = lease.state == RequestState.PREEMPTING
            pool.leases.append(
                Held(
                    lease.id,
                    lease.subject,
                    dict(lease.resources),
                    dict(lease.borrowed),
                    lease.priority,
                    lease.preemptible,
                    lease.granted_at.timestamp(),
                    lease.grant_seq,
                    preempting,
                )
            )
            s.usage = plus(s.usage, lease.resources)
            if preempting:
                s.leaving = plus(s.leaving, lease.resources)
            for k, a in lease.resources.items():
                if k in pool.capacity:
                    pool.free[k] -= a
        self.preempted_for = {lease.id: lease.preempted_for for lease in snapshot.leases}
        self.requests = sorted(snapshot.requests, key=lambda r: (-r.priority, r.submitted_at, r.id))

    # -- §2.1 ----------------------------------------------------------------------------------------

    def candidates(self, request: Request) -> list[str]:
        ranked = sorted((-p.priority, p.pool) for p in self.policies if p.subject == request.subject)
        names = [name for _, name in ranked]
        if request.pools is not None:
            names = [n for n in names if n in request.pools]
        return [n for n in names if self.eligible(self.pools[n], request)]

    def eligible(self, pool: Pool, request: Request) -> bool:
        s = pool.subjects[request.subject]
        for k, a in demand_of(request).items():
            if k not in pool.capacity:
                if k in UNBOUNDED_WHEN_UNMETERED:
                    continue
                return False
            if pool.capacity[k] <= 0 or a > pool.capacity[k]:
                return False
            if s.limit is not None and k in s.limit and a > s.limit[k]:
                return False
            if not request.preemptible and a > get(s.reserved, k):
                return False
        return True

    # -- accounting -----------------------------------------------------------------------------------

    def fits(self, pool: Pool, request: Request, released: Vec, own: Vec) -> bool:
        s = pool.subjects[request.subject]
        for k, a in demand_of(request).items():
            if k not in pool.capacity:
                continue
            used = get(s.usage, k) + get(s.incoming, k) - get(own, k)
            if not request.preemptible and used + a > get(s.reserved, k):
                return False
            if s.limit is not None and k in s.limit and used + a > s.limit[k]:
                return False
            if get(pool.free, k) + get(released, k) < a:
                return False
        return True

    def grant(self, pool: Pool, request: Request) -> None:
        s = pool.subjects[request.subject]
        demand = demand_of(request)
        borrowed: Vec = {}
        for k, a in demand.items():
            if k in pool.capacity:
                used = get(s.usage, k) + get(s.incoming, k)
                part = max(0, used + a - get(s.reserved, k)) - max(0, used - get(s.reserved, k))
                if part:
                    borrowed[k] = part
                pool.free[k] -= a
        s.usage = plus(s.usage, demand)
        self.out.grants.append((request.id, pool.name, demand, borrowed))
        self.seq += 1
        pool.leases.append(
            Held(
                request.id,
                request.subject,
                demand,
                borrowed,
                request.priority,
                request.preemptible,
                self.now,
                self.seq,
                fresh=True,
            )
        )

    def try_grant(self, pool: Pool, request: Request) -> bool:
        if self.fits(pool, request, {}, {}):
            self.grant(pool, request)
            return True
        return False

    def hold(self, pool: Pool, request: Request) -> None:
        s = pool.subjects[request.subject]
        demand = demand_of(request)
        s.incoming = plus(s.incoming, demand)
        for k, a in demand.items():
            if k in pool.capacity:
                kept = min(max(get(pool.free, k), 0), a)
                pool.free[k] -= kept
                pool.held[k] = get(pool.held, k) + kept

    # -- §2.5 -----------------------------------------------------------------------------------------

    def plan(
        self, pool: Pool, request: Request, may_reclaim: bool = True
    ) -> tuple[list[tuple[Held, str, bool]], str] | None:
        me = pool.subjects[request.subject]
        demand = demand_of(request)
        metered = [k for k in demand if k in pool.capacity]
        short = [k for k in metered if get(pool.free, k) < demand[k]]
        own = [
            lease
            for lease in pool.leases
            if lease.subject == request.subject
            and lease.preemptible
            and not lease.preempting
            and lease.priority < request.priority
        ]
        own_all: Vec = {}
        for lease in own:
            own_all = plus(own_all, lease.resources)
        mine = effective(me)
        within_limit = True
        reclaim = may_reclaim
        for k in metered:
            a = demand[k]
            limit = me.limit[k] if me.limit is not None and k in me.limit else pool.capacity[k]
            if get(me.usage, k) + get(me.incoming, k) - get(own_all, k) + a > limit:
                within_limit = False
            if get(mine, k) - get(own_all, k) + a > get(me.reserved, k):
                reclaim = False
        candidates: list[tuple[tuple[Any, ...], Held, str, bool]] = []
        if within_limit:
            for subject, other in pool.subjects.items():
                if subject == request.subject:
                    continue
                theirs = effective(other)
                borrowing = [k for k in short if get(theirs, k) > get(other.reserved, k)]
                if reclaim:
                    why = PreemptReason.RECLAIM.value
                elif me.priority > other.priority:
                    why = PreemptReason.PRIORITY.value
                elif pool.fair and request.preemptible and me.priority == other.priority:
                    why = PreemptReason.FAIR_SHARE.value
                else:
                    continue
                for lease in pool.leases:
                    if lease.subject != subject or not lease.preemptible or lease.preempting:
                        continue
                    if any(get(lease.borrowed, k) > 0 for k in borrowing):
                        order = (0, other.priority, lease.priority, -lease.ts, -lease.seq, lease.id)
                        candidates.append((order, lease, why, False))
        for lease in own:
            order = (1, me.priority, lease.priority, -lease.ts, -lease.seq, lease.id)
            candidates.append((order, lease, PreemptReason.PRIORITY.value, True))
        candidates.sort(key=lambda c: c[0])

        def fits_without(chosen: list[tuple[Held, str, bool]]) -> bool:
            released: Vec = {}
            own_released: Vec = {}
            for lease, _, is_own in chosen:
                released = plus(released, lease.resources)
                if is_own:
                    own_released = plus(own_released, lease.resources)
            return self.fits(pool, request, released, own_released)

        chosen: list[tuple[Held, str, bool]] = []
        for _, lease, why, is_own in candidates:
            if why == PreemptReason.FAIR_SHARE.value and not self.fair(pool, request, [*chosen, (lease, why, is_own)]):
                continue
            chosen.append((lease, why, is_own))
            if fits_without(chosen):
                break
        else:
            return None
        for index in range(len(chosen) - 1, -1, -1):
            trial = chosen[:index] + chosen[index + 1 :]
            if len(chosen) > 1 and fits_without(trial):
                chosen = trial
        if any(why == PreemptReason.RECLAIM.value for _, why, _ in chosen):
            after = plus(effective(me), demand)
            for lease, _, is_own in chosen:
                if is_own:
                    after = plus(after, lease.resources, -1)
            if any(get(after, k) > get(me.reserved, k) for k in metered):
                return self.plan(pool, request, may_reclaim=False)
        others = [why for _, why, is_own in chosen if not is_own]
        return chosen, (others[0] if others else PreemptReason.PRIORITY.value)

    def fair(self, pool: Pool, request: Request, chosen: list[tuple[Held, str, bool]]) -> bool:
        me = pool.subjects[request.subject]
        after = plus(effective(me), demand_of(request))
        for lease, _, is_own in chosen:
            if is_own:
                after = plus(after, lease.resources, -1)
        mine = share(pool, me, after)
        losses: dict[str, Vec] = {}
        for lease, why, _ in chosen:
            if why == PreemptReason.FAIR_SHARE.value:
                losses[lease.subject] = plus(losses.get(lease.subject, {}), lease.resources)
        for subject, lost in losses.items():
            victim = pool.subjects[subject]
            if mine > share(pool, victim, plus(effective(victim), lost, -1)):
                return False
        return True

    def preempt(self, pool: Pool, request: Request, chosen: list[tuple[Held, str, bool]], reason: str) -> None:
        fresh = [lease for lease, _, _ in chosen if lease.fresh]
        real = [lease for lease, _, _ in chosen if not lease.fresh]
        freed: Vec = {}
        for lease in fresh:
            self.out.grants = [g for g in self.out.grants if g[0] != lease.id]
            pool.leases.remove(lease)
            s = pool.subjects[lease.subject]
            s.usage = plus(s.usage, lease.resources, -1)
            freed = plus(freed, lease.resources)
            for k, a in lease.resources.items():
                if k in pool.capacity:
                    pool.free[k] += a
            self.decided.add(lease.id)
        if not real:
            granted = self.try_grant(pool, request)
            assert granted, "the plan found that it fits"
            demand = demand_of(request)
            for k, a in freed.items():
                if k in pool.capacity:
                    excess = min(a - get(demand, k), pool.free[k])
                    if excess > 0:
                        pool.free[k] -= excess
                        pool.held[k] = get(pool.held, k) + excess
            return
        for lease in real:
            lease.preempting = True
            s = pool.subjects[lease.subject]
            s.leaving = plus(s.leaving, lease.resources)
        self.out.preemptions.append((request.id, pool.name, tuple(lease.id for lease in real), reason))
        self.hold(pool, request)

    # -- §2.4: the cycle ------------------------------------------------------------------------------

    def order_key(self, request: Request, pools: list[str]) -> tuple[Any, ...]:
        pool = self.pools[pools[0]]
        s = pool.subjects[request.subject]
        demand = demand_of(request)
        used = plus(plus(s.usage, s.incoming), demand)
        in_share = all(get(used, k) <= get(s.reserved, k) for k in demand if k in pool.capacity)
        ts = request.submitted_at.timestamp()
        if in_share:
            return (-s.priority, 0, 0.0, ts, request.id)
        return (-s.priority, 1, share(pool, s, used), ts, request.id)

    def run(self) -> Outcome:
        where: dict[str, list[str]] = {}
        self.decided: set[str] = set()
        for request in self.requests:
            pools = self.candidates(request)
            if pools:
                where[request.id] = pools
            else:
                self.out.rejects.add(request.id)
        for request in self.requests:  # nominated waiters, in queue order
            eligible = where.get(request.id)
            if eligible is None or request.nominated_pool not in eligible:
                continue
            pool = self.pools[request.nominated_pool]
            if self.try_grant(pool, request):
                self.decided.add(request.id)
                continue
            in_flight = [
                lease for lease in pool.leases if lease.preempting and self.preempted_for.get(lease.id) == request.id
            ]
            if in_flight:
                self.hold(pool, request)
                self.decided.add(request.id)
        while True:
            heads: dict[str, Request] = {}
            for request in self.requests:  # already in (request priority, submission) order
                if request.id in where and request.id not in self.decided and request.subject not in heads:
                    heads[request.subject] = request
            if not heads:
                return self.out
            request = min(heads.values(), key=lambda r: self.order_key(r, where[r.id]))
            self.decided.add(request.id)
            self.serve(request, where[request.id])

    def serve(self, request: Request, pools: list[str]) -> None:
        for name in pools:
            if self.try_grant(self.pools[name], request):
                return
        for name in pools:
            found = self.plan(self.pools[name], request)
            if found is not None:
                self.preempt(self.pools[name], request, *found)
                return


def oracle(snapshot: Snapshot) -> Outcome:
    return Oracle(snapshot).run()

"""One scheduling cycle: snapshot in, decisions out (DESIGN §2). Pure: no I/O, no clock.

The cycle (1) expires and revokes leases whose deadlines passed, (2) builds each pool's accounting,
(3) rejects requests that fit no pool, (4) serves nominated waiters first — capacity being freed by
preemption is held for them — and (5) walks the subjects' queue heads in the order of §2.4 through a
heap, granting, planning preemption, or recording why each request waits.

Cost is kept near-linear in the queue length: a subject's requests are compared to the requests of
the same subject that already failed this cycle, and one that asks for at least as much under the same
constraints is known to fail without another look (capacity only shrinks during a cycle).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

from respools.model import Lease, Placement, Request, RequestState, Resources, WaitReason
from respools.scheduling.decisions import Decisions, Expire, Grant, Preempt, Reject, Revoke, Wait
from respools.scheduling.eligibility import ineligibility
from respools.scheduling.fit import Shortfall, place, quota_shortfall, reservation_shortfall
from respools.scheduling.preemption import Plan, plan_preemption
from respools.scheduling.requests import RequestView, view_of
from respools.scheduling.snapshot import Snapshot
from respools.scheduling.state import LeaseView, PoolState, SubjectQuota, build_pools
from respools.scheduling.vectors import add_into, dominates

_NOT_PREEMPTABLE = frozenset({WaitReason.RESERVATION_WINDOW, WaitReason.POOL_DRAINING})
OrderKey = tuple[int, int, float, float, str]


def schedule(snapshot: Snapshot) -> Decisions:
    """Decide grants, rejections, preemptions and waits for one snapshot."""
    return _Cycle(snapshot).run()


class _Cycle:
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.now_ts = snapshot.now.timestamp()
        self.decisions = Decisions()
        self.position = 0
        self.pools: dict[str, PoolState] = {}
        self.failures: dict[str, list[tuple[tuple[object, ...], int, dict[str, int], Shortfall]]] = {}

    def run(self) -> Decisions:
        live = self._expire(self.snapshot.leases)
        s = self.snapshot
        self.pools = build_pools(s.now, s.pools, s.policies, s.reservations, live)
        views = self._eligible(s.requests)
        done = self._serve_nominated(views)
        self._serve_queues([rv for rv in views if rv.id not in done])
        return self.decisions

    # -- (1) deadlines ------------------------------------------------------------------------------

    def _expire(self, leases: Iterable[Lease]) -> list[Lease]:
        now = self.snapshot.now
        live = []
        for lease in leases:
            if lease.state == RequestState.PREEMPTING and lease.preempt_deadline and lease.preempt_deadline <= now:
                self.decisions.revocations.append(Revoke(lease.id))
            elif lease.expires_at <= now:
                why = (
                    "it was never started within the pool's initialization window"
                    if lease.started_at is None
                    else "its heartbeats stopped for longer than the pool's lease TTL"
                )
                self.decisions.expiries.append(Expire(lease.id, why))
            else:
                live.append(lease)
        return live

    # -- (3) eligibility ----------------------------------------------------------------------------

    def _eligible(self, requests: Iterable[Request]) -> list[RequestView]:
        pools_of: dict[str, list[tuple[int, str]]] = {}
        for policy in self.snapshot.policies:
            if policy.pool in self.pools:
                pools_of.setdefault(policy.subject, []).append((-policy.priority, policy.pool))
        for ranked in pools_of.values():
            ranked.sort()
        cache: dict[tuple[object, ...], str | None] = {}
        views: list[RequestView] = []
        ordered = sorted(requests, key=lambda r: (-r.priority, r.submitted_at.timestamp(), r.id))
        for request in ordered:
            rv = view_of(request)
            names = [n for _, n in pools_of.get(rv.subject, [])]
            if request.pools is not None:
                names = [n for n in names if n in request.pools]
            if not names:
                asked = f" among {', '.join(request.pools)}" if request.pools else ""
                self.decisions.rejects.append(
                    Reject(
                        rv.id,
                        f"subject {rv.subject!r} has no policy on any pool{asked}: ask an admin for one",
                    )
                )
                continue
            reasons = []
            demand_key = tuple(sorted(rv.demand.items()))
            for name in names:
                state = self.pools[name]
                quota = state.quotas[rv.subject]
                key = (name, rv.subject, demand_key, rv.preemptible, rv.shape)
                if key not in cache:
                    cache[key] = ineligibility(state, quota, rv)
                why = cache[key]
                if why is None:
                    rv.candidates.append((state, quota))
                else:
                    reasons.append(why)
            if not rv.candidates:
                self.decisions.rejects.append(Reject(rv.id, "; ".join(reasons)))
                continue
            rv.signature = (tuple(s.name for s, _ in rv.candidates), rv.preemptible, rv.shape, request.max_runtime_s)
            views.append(rv)
        return views

    # -- (4) nominated waiters ----------------------------------------------------------------------

    def _serve_nominated(self, views: list[RequestView]) -> set[str]:
        in_flight: dict[str, list[LeaseView]] = {}
        for state in self.pools.values():
            for quota in state.quotas.values():
                for lv in quota.leases:
                    if lv.preempting and lv.preempted_for:
                        in_flight.setdefault(lv.preempted_for, []).append(lv)
        done: set[str] = set()
        for rv in views:
            nominated = rv.request.nominated_pool
            entry = next(((s, q) for s, q in rv.candidates if s.name == nominated), None)
            if entry is None:
                continue
            state, quota = entry
            if self._try_grant(state, quota, rv) is None:
                done.add(rv.id)
                continue
            victims = [lv for lv in in_flight.get(rv.id, []) if lv.lease.pool == state.name]
            if victims:
                self._hold(state, quota, rv, victims)
                self._wait(
                    rv,
                    (WaitReason.PREEMPTING, f"waiting for {len(victims)} preempted lease(s) to release"),
                    state.name,
                )
                done.add(rv.id)
        return done

    # -- (5) the queues -----------------------------------------------------------------------------

    def _serve_queues(self, views: list[RequestView]) -> None:
        queues: dict[str, list[RequestView]] = {}
        for rv in views:
            queues.setdefault(rv.subject, []).append(rv)
        cursor = dict.fromkeys(queues, 0)
        heap: list[tuple[OrderKey, str]] = [(_order_key(q[0]), s) for s, q in queues.items()]
        heapq.heapify(heap)
        while heap:
            _, subject = heapq.heappop(heap)
            queue = queues[subject]
            index = cursor[subject]
            self._serve(queue[index])
            index += 1
            failures = self.failures.get(subject)
            while failures and index < len(queue):
                known = _known_failure(queue[index], failures)
                if known is None:
                    break
                self._wait(queue[index], known, queue[index].candidates[0][0].name)
                index += 1
            cursor[subject] = index
            if index < len(queue):
                heapq.heappush(heap, (_order_key(queue[index]), subject))

    def _serve(self, rv: RequestView) -> None:
        first = self._try_grant_anywhere(rv)
        if first is None:
            return
        shortfall, pool_name = first
        if shortfall[0] not in _NOT_PREEMPTABLE:
            for state, quota in rv.candidates:
                if state.spec.draining:
                    continue
                plan = plan_preemption(state, quota, rv)
                if plan is not None:
                    self._preempt(state, quota, rv, plan)
                    return
        self.failures.setdefault(rv.subject, []).append((rv.signature, rv.priority, rv.demand, shortfall))
        self._wait(rv, shortfall, pool_name)

    def _try_grant_anywhere(self, rv: RequestView) -> tuple[Shortfall, str] | None:
        """Grant on the first candidate pool that fits without preemption (DESIGN §2.7); else the
        reason it waits on its first choice."""
        first: tuple[Shortfall, str] | None = None
        for state, quota in rv.candidates:
            shortfall = self._try_grant(state, quota, rv)
            if shortfall is None:
                return None
            if first is None:
                first = (shortfall, state.name)
        return first

    def _try_grant(self, state: PoolState, quota: SubjectQuota, rv: RequestView) -> Shortfall | None:
        if state.spec.draining:
            return (WaitReason.POOL_DRAINING, f"pool {state.name!r} is draining")
        shortfall = quota_shortfall(state, quota, rv) or reservation_shortfall(state, quota, rv, self.now_ts)
        if shortfall is not None:
            return shortfall
        placement = place(state, rv)
        if placement is None:
            return (
                WaitReason.FRAGMENTED,
                f"pool {state.name!r} has the capacity but no host with free devices of this shape",
            )
        self._grant(state, quota, rv, placement)
        return None

    # -- effects ------------------------------------------------------------------------------------

    def _grant(self, state: PoolState, quota: SubjectQuota, rv: RequestView, placement: Placement) -> None:
        borrowed: dict[str, int] = {}
        for key, amount in rv.demand.items():
            if key not in state.capacity:
                continue
            used = quota.usage.get(key, 0)
            reserved = quota.reserved.get(key, 0)
            part = max(0, used + amount - reserved) - max(0, used - reserved)
            if part:
                borrowed[key] = part
            state.free[key] -= amount
        for key, amount in rv.demand.items():
            quota.usage[key] = quota.usage.get(key, 0) + amount
        if state.devices is not None and placement.items:
            state.devices.occupy(placement)
        self.decisions.grants.append(Grant(rv.id, state.name, Resources(rv.demand), Resources(borrowed), placement))

    def _preempt(self, state: PoolState, quota: SubjectQuota, rv: RequestView, plan: Plan) -> None:
        for lv in plan.victims:
            lv.preempting = True
            add_into(state.quotas[lv.subject].leaving, lv.resources)
        ids = tuple(lv.id for lv in plan.victims)
        subjects = sorted({lv.subject for lv in plan.victims})
        message = (
            f"{plan.reason.value}: {len(ids)} lease(s) of {', '.join(subjects)} preempted in pool "
            f"{state.name!r} for request {rv.id} of {rv.subject!r}"
        )
        self.decisions.preemptions.append(Preempt(rv.id, state.name, ids, plan.reason, message))
        self._hold(state, quota, rv, list(plan.victims))
        self._wait(rv, (WaitReason.PREEMPTING, f"waiting for {len(ids)} preempted lease(s) to release"), state.name)

    def _hold(self, state: PoolState, quota: SubjectQuota, rv: RequestView, victims: list[LeaseView]) -> None:
        """Keep what is free now, and the devices the victims will free, for the waiter."""
        add_into(quota.incoming, rv.demand)
        for key, amount in rv.demand.items():
            if key in state.capacity:
                held = min(max(state.free.get(key, 0), 0), amount)
                state.free[key] -= held
                state.held[key] = state.held.get(key, 0) + held
        if state.devices is None or not rv.shape.needs_devices:
            return
        placements = [lv.lease.placement for lv in victims]
        state.devices.release_all(placements)
        target = state.devices.place(rv.shape)
        for placement in placements:
            state.devices.occupy(placement)
        if target is not None:
            state.devices.occupy(target)

    def _wait(self, rv: RequestView, shortfall: Shortfall, pool: str | None) -> None:
        self.position += 1
        self.decisions.waits.append(Wait(rv.id, shortfall[0], shortfall[1], self.position, pool))


def _order_key(rv: RequestView) -> OrderKey:
    """DESIGN §2.4 across subjects, judged on the request's first-choice pool: policy priority, then
    waiters within their reserved share, then borrowers by weighted dominant share after the grant,
    then submission time."""
    state, quota = rv.candidates[0]
    capacity = state.capacity
    dominant = 0.0
    in_share = True
    for key, amount in rv.demand.items():
        cap = capacity.get(key)
        if cap is None:
            continue
        borrowed = quota.usage.get(key, 0) + amount - quota.reserved.get(key, 0)
        if borrowed > 0:
            in_share = False
            dominant = max(dominant, borrowed / cap)
    if in_share:
        return (-quota.priority, 0, 0.0, rv.submitted_ts, rv.id)
    for key, cap in capacity.items():
        if key not in rv.demand:
            borrowed = quota.usage.get(key, 0) - quota.reserved.get(key, 0)
            if borrowed > 0:
                dominant = max(dominant, borrowed / cap)
    share = math.inf if quota.weight == 0 else dominant / quota.weight
    return (-quota.priority, 1, share, rv.submitted_ts, rv.id)


def _known_failure(
    rv: RequestView, failures: list[tuple[tuple[object, ...], int, dict[str, int], Shortfall]]
) -> Shortfall | None:
    for signature, priority, demand, shortfall in failures:
        if signature == rv.signature and rv.priority <= priority and dominates(rv.demand, demand):
            return shortfall
    return None

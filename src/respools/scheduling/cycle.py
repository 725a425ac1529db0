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

import gc
import heapq
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from operator import attrgetter
from typing import cast

from respools.model import Lease, Placement, Request, RequestState, Resources, WaitReason
from respools.scheduling.decisions import Decisions, Expire, Grant, Preempt, Reject, Revoke, Wait
from respools.scheduling.eligibility import ineligibility
from respools.scheduling.fit import Shortfall, place, quota_shortfall, reservation_shortfall
from respools.scheduling.preemption import Plan, plan_preemption
from respools.scheduling.requests import RequestGroup, RequestView, group_key, view_of
from respools.scheduling.snapshot import Snapshot
from respools.scheduling.state import LeaseView, PoolState, SubjectQuota, build_pools
from respools.scheduling.vectors import add_into, dominates

_NOT_PREEMPTABLE = frozenset({WaitReason.RESERVATION_WINDOW, WaitReason.POOL_DRAINING})
OrderKey = tuple[int, int, float, float, str]
_SUBMISSION_ORDER = attrgetter("submitted_at", "id")
"""Queue order within a group (same priority): oldest first, ties by id. A C-level key: queues are long."""
Failure = tuple[tuple[object, ...], int, dict[str, int], Shortfall]
"""Signature, request priority, demand and shortfall of a request that could not be served."""


def schedule(snapshot: Snapshot) -> Decisions:
    """Decide grants, rejections, preemptions and waits for one snapshot."""
    with _collector_paused():
        return _Cycle(snapshot).run()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """A cycle allocates many short-lived tuples and no garbage cycles; left on, the cyclic collector
    would run generational passes over the whole snapshot (hundreds of thousands of objects) again and
    again, which measured as most of a large cycle's time. Reference counting frees everything anyway."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Cycle:
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.now_ts = snapshot.now.timestamp()
        self.decisions = Decisions()
        self.position = 0
        self.pools: dict[str, PoolState] = {}
        self.failures: dict[str, list[Failure]] = {}

    def run(self) -> Decisions:
        live = self._expire(self.snapshot.leases)
        s = self.snapshot
        self.pools = build_pools(s.now, s.pools, s.policies, s.reservations, live)
        groups = self._eligible(s.requests)
        self._serve_nominated(groups)
        self._serve_queues(groups)
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
        """Group look-alike requests, classify each group once, reject the groups that fit nowhere.
        Returns one view per group (its first request), members in ``group.members``."""
        pools_of: dict[str, list[tuple[int, str]]] = {}
        for policy in self.snapshot.policies:
            if policy.pool in self.pools:
                pools_of.setdefault(policy.subject, []).append((-policy.priority, policy.pool))
        for ranked in pools_of.values():
            ranked.sort()
        members: dict[tuple[object, ...], list[Request]] = {}
        for request in requests:
            key = group_key(request)
            bucket = members.get(key)
            if bucket is None:
                members[key] = [request]
            else:
                bucket.append(request)
        heads: list[RequestView] = []
        classified: dict[tuple[object, ...], RequestGroup] = {}
        for key, bucket in members.items():
            bucket.sort(key=_SUBMISSION_ORDER, reverse=True)
            rv = view_of(bucket[-1])
            # Eligibility does not depend on request priority or nomination: classify once for all.
            same = classified.get(key[:3] + key[4:9])
            if same is None:
                classified[key[:3] + key[4:9]] = rv.group
                self._classify(rv, [n for _, n in pools_of.get(rv.subject, [])])
            else:
                rv.group.candidates = same.candidates
                rv.group.rejection = same.rejection
                rv.group.signature = same.signature
            rv.group.members = bucket
            if rv.group.rejection is None:
                heads.append(rv)
            else:
                self.decisions.rejects.extend(Reject(r.id, rv.group.rejection) for r in reversed(bucket))
        heads.sort(key=lambda rv: (-rv.priority, rv.submitted_ts, rv.id))
        return heads

    def _classify(self, rv: RequestView, names: list[str]) -> None:
        """Fill the group's candidate pools, or its rejection when none is eligible."""
        request = rv.request
        if request.pools is not None:
            names = [n for n in names if n in request.pools]
        if not names:
            asked = f" among {', '.join(request.pools)}" if request.pools else ""
            rv.group.rejection = f"subject {rv.subject!r} has no policy on any pool{asked}: ask an admin for one"
            return
        reasons = []
        for name in names:
            state = self.pools[name]
            quota = state.quotas[rv.subject]
            why = ineligibility(state, quota, rv)
            if why is None:
                rv.group.candidates.append((state, quota))
            else:
                reasons.append(why)
        if not rv.group.candidates:
            rv.group.rejection = "; ".join(reasons)
            return
        names = [s.name for s, _ in rv.group.candidates]
        shape = rv.shape
        rv.group.signature = (
            tuple(names),
            rv.preemptible,
            (shape.gpu_class, shape.selectors, shape.replicas, shape.memory_mb),
            request.max_runtime_s,
        )

    # -- (4) nominated waiters ----------------------------------------------------------------------

    def _serve_nominated(self, groups: list[RequestView]) -> None:
        in_flight: dict[str, list[LeaseView]] = {}
        for state in self.pools.values():
            for quota in state.quotas.values():
                for lv in quota.leases:
                    if lv.preempting and lv.preempted_for:
                        in_flight.setdefault(lv.preempted_for, []).append(lv)
        for proto in groups:
            nominated = proto.request.nominated_pool
            if nominated is None:
                continue
            entry = next(((s, q) for s, q in proto.candidates if s.name == nominated), None)
            if entry is None:
                continue
            state, quota = entry
            undecided = []
            for request in reversed(proto.group.members):
                rv = proto.sibling(request)
                if self._try_grant(state, quota, rv) is None:
                    continue
                victims = [lv for lv in in_flight.get(rv.id, []) if lv.lease.pool == state.name]
                if not victims:
                    undecided.append(request)
                    continue
                self._hold(state, quota, rv, victims)
                self._wait(
                    rv,
                    (WaitReason.PREEMPTING, f"waiting for {len(victims)} preempted lease(s) to release"),
                    state.name,
                )
            proto.group.members = undecided[::-1]

    # -- (5) the queues -----------------------------------------------------------------------------

    def _serve_queues(self, groups: list[RequestView]) -> None:
        """Subjects compete through their queue heads (a heap keyed by §2.4's order); inside a subject,
        requests are kept per group, and a group whose failure is known for the rest of the cycle is
        answered in bulk, so that the queue's length costs one pass, not one decision each."""
        queues: dict[str, _SubjectQueue] = {}
        for proto in groups:
            if proto.group.members:
                queues.setdefault(proto.subject, _SubjectQueue()).add(proto)
        heap: list[tuple[OrderKey, str]] = [(_order_key(q.head()), s) for s, q in queues.items()]
        heapq.heapify(heap)
        while heap:
            _, subject = heapq.heappop(heap)
            queue = queues[subject]
            self._serve(queue.pop())
            failures = self.failures.get(subject)
            if failures:
                for proto in queue.settle(failures):
                    self._wait_all(proto)
            if queue:
                heapq.heappush(heap, (_order_key(queue.head()), subject))

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
        self.failures.setdefault(rv.subject, []).append((rv.group.signature, rv.priority, rv.demand, shortfall))
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

    def _wait_all(self, proto: RequestView) -> None:
        shortfall = cast(Shortfall, proto.group.failure)
        pool = proto.candidates[0][0].name
        waits = self.decisions.waits
        for request in reversed(proto.group.members):
            self.position += 1
            waits.append(Wait(request.id, shortfall[0], shortfall[1], self.position, pool))
        proto.group.members = []

    def _wait(self, rv: RequestView, shortfall: Shortfall, pool: str | None) -> None:
        self.position += 1
        self.decisions.waits.append(Wait(rv.id, shortfall[0], shortfall[1], self.position, pool))


class _SubjectQueue:
    """One subject's waiting requests by group; the heads of its groups in §2.4's in-subject order
    (request priority, then submission time)."""

    def __init__(self) -> None:
        self._groups: dict[int, RequestView] = {}
        self._heads: list[tuple[int, float, str, int]] = []

    def add(self, proto: RequestView) -> None:
        key = id(proto.group)
        self._groups[key] = proto
        self._push(key)

    def _push(self, key: int) -> None:
        proto = self._groups[key]
        request = proto.group.members[-1]
        heapq.heappush(self._heads, (-proto.priority, request.submitted_at.timestamp(), request.id, key))

    def __bool__(self) -> bool:
        return bool(self._heads)

    def head(self) -> RequestView:
        proto = self._groups[self._heads[0][3]]
        return proto.sibling(proto.group.members[-1])

    def pop(self) -> RequestView:
        key = heapq.heappop(self._heads)[3]
        proto = self._groups[key]
        rv = proto.sibling(proto.group.members.pop())
        if proto.group.members:
            self._push(key)
        else:
            del self._groups[key]
        return rv

    def settle(self, failures: list[Failure]) -> list[RequestView]:
        """Take out every group bound to fail for the rest of the cycle."""
        doomed = [key for key, proto in self._groups.items() if _known_failure(proto, failures)]
        if not doomed:
            return []
        out = [self._groups.pop(key) for key in doomed]
        self._heads = [h for h in self._heads if h[3] in self._groups]
        heapq.heapify(self._heads)
        return out


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


def _known_failure(rv: RequestView, failures: list[Failure]) -> Shortfall | None:
    """A failure of the same subject this cycle that this request is bound to repeat: same constraints,
    no higher priority, at least as much asked. Checked once per group and new failure."""
    group = rv.group
    if group.failure is None:
        for signature, priority, demand, shortfall in failures[group.failures_seen :]:
            if signature == group.signature and rv.priority <= priority and dominates(rv.demand, demand):
                group.failure = shortfall
                break
        group.failures_seen = len(failures)
    return cast(Shortfall | None, group.failure)

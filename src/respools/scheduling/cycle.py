"""One scheduling cycle: snapshot in, decisions out (DESIGN §2). Pure: no I/O, no clock.

The cycle (1) expires and revokes leases whose deadlines passed, (2) builds each pool's accounting,
(3) rejects requests that fit no pool, (4) serves nominated waiters first — capacity being freed by
preemption is held for them — and (5) walks the subjects' queue heads in the order of §2.4 through a
heap, granting, planning preemption, or recording why each request waits.

Cost is kept near-linear in the queue length and small per request:

- look-alike requests are grouped, and a group is classified, ordered and answered as one; a
  subject's groups are compared to the requests of the same subject that already failed this cycle,
  and one that asks for at least as much under the same constraints is known to fail without another
  look (capacity only shrinks during a cycle);
- each request is read once, in the order it sits in memory (``__dict__``, not pydantic attributes);
- what preemption planning derives from a pool or a subject's standing (who may be taken, what they
  hold, whether a shape fits the map) is cached until the cycle changes that pool or subject, which
  it marks with ``PoolState.changed``.
"""

from __future__ import annotations

import gc
import heapq
import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from respools.model import Lease, Placement, Request, RequestState, Resources, WaitReason
from respools.scheduling.decisions import Decisions, Expire, Grant, Overdue, Preempt, Reject, Revoke, WaitRun
from respools.scheduling.eligibility import ineligibility
from respools.scheduling.fit import Shortfall, place, quota_shortfall, reservation_shortfall
from respools.scheduling.memory import KeptEligibility, Memory
from respools.scheduling.placement import Held
from respools.scheduling.preemption import Plan, plan_preemption
from respools.scheduling.requests import (
    Derived,
    Eligibility,
    GroupKeys,
    RequestGroup,
    RequestView,
    bucketed,
    view_of,
)
from respools.scheduling.snapshot import Snapshot
from respools.scheduling.state import LeaseView, PoolState, SubjectQuota, build_pools, waiting_for
from respools.scheduling.vectors import add_into, dominates

_NOT_PREEMPTABLE = frozenset({WaitReason.RESERVATION_WINDOW, WaitReason.POOL_DRAINING})
OrderKey = tuple[int, int, float, float, str]
Failure = tuple[tuple[object, ...], int, dict[str, int], Shortfall]
"""Signature, request priority, demand and shortfall of a request that could not be served."""


def schedule(snapshot: Snapshot, memory: Memory | None = None) -> Decisions:
    """Decide grants, rejections, preemptions and waits for one snapshot.

    ``memory`` is for a caller that schedules the same pools and queue cycle after cycle: kept from
    one cycle to the next, it spares deriving again what cannot have changed (see ``Memory`` for what
    that asks of ids and definitions). The decisions are the same with or without it."""
    with _collector_paused():
        return _Cycle(snapshot, memory).run()


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


_UNCLASSIFIED = Eligibility([], "not classified yet")


class _Cycle:
    def __init__(self, snapshot: Snapshot, memory: Memory | None = None) -> None:
        self.snapshot = snapshot
        self.memory = memory
        self.now_ts = snapshot.now.timestamp()
        self.decisions = Decisions()
        self.position = 0
        self.pools: dict[str, PoolState] = {}
        self.fresh: dict[int, tuple[Grant, RequestView]] = {}
        self.granted = 0
        """Grants made so far, withdrawn ones included: the order of this cycle's lease views."""
        """This cycle's grants by their lease view's identity: candidates for later waiters (§2.5)."""

    def run(self) -> Decisions:
        live = self._expire(self.snapshot.leases)
        s = self.snapshot
        kept = self.memory.accounting if self.memory is not None else None
        self.pools = build_pools(s.now, s.pools, s.policies, s.reservations, live, kept)
        groups, nominated = self._eligible(s.requests)
        self._serve_nominated(nominated)
        self._serve_queues(groups)
        return self.decisions

    # -- (1) deadlines ------------------------------------------------------------------------------

    def _expire(self, leases: Iterable[Lease]) -> list[Lease]:
        now = self.snapshot.now
        live = []
        for lease in leases:
            if lease.state == RequestState.PREEMPTING and lease.preempt_deadline and lease.preempt_deadline <= now:
                # Past the deadline the lease is overdue and keeps its capacity: its workload may still
                # run on the GPUs. Only a holder silent for a full TTL is taken for gone here; a release
                # or a backend's confirmed stop ends it outside the cycle (DESIGN §2.8).
                if lease.expires_at <= now:
                    self.decisions.revocations.append(Revoke(lease.id))
                    continue
                if lease.overdue_since is None:
                    self.decisions.overdue.append(Overdue(lease.id))
                live.append(lease)
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

    def _eligible(self, requests: Sequence[Request]) -> tuple[list[RequestView], list[RequestView]]:
        """Group look-alike requests, classify each group once, reject the groups that fit nowhere.
        Returns one view per group (its first request), members in ``group.members``, in queue order;
        and the same for the groups nominated for a pool alone."""
        pools_of: dict[str, list[tuple[int, str]]] = {}
        for policy in self.snapshot.policies:
            if policy.pool in self.pools:
                pools_of.setdefault(policy.subject, []).append((-policy.priority, policy.pool))
        for ranked in pools_of.values():
            ranked.sort()
        memory = self.memory
        groups = memory.groups if memory is not None else GroupKeys()
        members = bucketed(requests, groups)
        s = self.snapshot
        kept: dict[int, KeptEligibility] = (
            {} if memory is None else memory.eligibility_for(s.now, s.pools, s.policies, s.reservations)
        )
        heads: list[RequestView] = []
        nominated: list[RequestView] = []
        classified: dict[int, Eligibility] = {}
        shapes: dict[tuple[object, ...], Derived] = {}
        for known, bucket, ids in members.values():
            bucket.reverse()
            ids.reverse()
            key = known.key
            rv = view_of(bucket[-1], known, RequestGroup(_UNCLASSIFIED, bucket, ids), shapes)
            # Eligibility does not depend on request priority or nomination: classify once for all.
            eligibility = classified.get(known.eligibility_class)
            if eligibility is None:
                found = kept.get(known.eligibility_class)
                if found is None:
                    names = [n for _, n in pools_of.get(rv.subject, [])]
                    eligibility = self._classify(rv, names)
                    kept[known.eligibility_class] = (
                        tuple(state.name for state, _ in eligibility.candidates),
                        eligibility.rejection,
                        eligibility.signature,
                    )
                else:
                    names_kept, rejection, signature = found
                    states = [self.pools[name] for name in names_kept]
                    candidates = [(state, state.quotas[rv.subject]) for state in states]
                    eligibility = Eligibility(candidates, rejection, signature)
                classified[known.eligibility_class] = eligibility
            rv.group.eligibility = eligibility
            if eligibility.rejection is None:
                heads.append(rv)
                if key[5] is not None:
                    nominated.append(rv)
            else:
                self.decisions.rejects.extend(Reject(request_id, eligibility.rejection) for request_id in reversed(ids))
        heads.sort(key=_queue_order)
        nominated.sort(key=_queue_order)
        return heads, nominated

    def _classify(self, rv: RequestView, names: list[str]) -> Eligibility:
        """The group's candidate pools, or its rejection when none is eligible."""
        request = rv.request
        if request.pools is not None:
            names = [n for n in names if n in request.pools]
        if not names:
            asked = f" among {', '.join(request.pools)}" if request.pools else ""
            return Eligibility([], f"subject {rv.subject!r} has no policy on any pool{asked}: ask an admin for one")
        candidates = []
        reasons = []
        for name in names:
            state = self.pools[name]
            quota = state.quotas[rv.subject]
            why = ineligibility(state, quota, rv)
            if why is None:
                candidates.append((state, quota))
            else:
                reasons.append(why)
        if not candidates:
            return Eligibility([], "; ".join(reasons))
        shape = rv.shape
        signature = (
            tuple(s.name for s, _ in candidates),
            rv.preemptible,
            (shape.gpu_class, shape.selectors, shape.replicas, shape.memory_mb),
            request.max_runtime_s,
        )
        return Eligibility(candidates, None, signature)

    # -- (4) nominated waiters ----------------------------------------------------------------------

    def _serve_nominated(self, nominated: list[RequestView]) -> None:
        in_flight: dict[str, list[LeaseView]] = {}
        for state in self.pools.values():
            for lv in state.preempting:
                if lv.preempted_for:
                    in_flight.setdefault(lv.preempted_for, []).append(lv)
        for proto in nominated:
            pool = proto.request.nominated_pool
            entry = next(((s, q) for s, q in proto.candidates if s.name == pool), None)
            if entry is None:
                continue
            state, quota = entry
            undecided = []
            for request in reversed(proto.group.members):
                rv = proto.sibling(request)
                if self._try_grant(state, quota, rv, worded=False) is None:
                    continue
                victims = [lv for lv in in_flight.get(rv.id, []) if lv.pool == state.name]
                if not victims:
                    undecided.append(request)
                    continue
                self._hold(state, quota, rv, victims)
                self._wait(rv, (WaitReason.PREEMPTING, waiting_for(victims)), state.name)
            proto.group.members = undecided[::-1]
            proto.group.ids = [request.id for request in proto.group.members]

    # -- (5) the queues -----------------------------------------------------------------------------

    def _serve_queues(self, groups: list[RequestView]) -> None:
        """Subjects compete through their queue heads (a heap keyed by §2.4's order); inside a subject,
        requests are kept per group, and a group whose failure is known for the rest of the cycle is
        answered in bulk, so that the queue's length costs one pass, not one decision each."""
        queues: dict[str, _SubjectQueue] = {}
        for proto in groups:
            if proto.group.members:
                queue = queues.get(proto.subject)
                if queue is None:
                    queue = queues[proto.subject] = _SubjectQueue()
                queue.add(proto)
        heap: list[tuple[OrderKey, str]] = [(q.order_key(), s) for s, q in queues.items()]
        heapq.heapify(heap)
        while heap:
            _, subject = heapq.heappop(heap)
            queue = queues[subject]
            failure = self._serve(queue.pop())
            if failure is not None:
                for proto in queue.settle(failure):
                    self._wait_all(proto)
            if queue:
                heapq.heappush(heap, (queue.order_key(), subject))

    def _serve(self, rv: RequestView) -> Failure | None:
        """Grant, preempt for, or fail ``rv``; a failure is returned so that its look-alikes share it."""
        first = self._try_grant_anywhere(rv)
        if first is None:
            return None
        shortfall, pool_name = first
        if shortfall[0] not in _NOT_PREEMPTABLE:
            for state, quota in rv.candidates:
                if state.spec.draining:
                    continue
                plan = plan_preemption(state, quota, rv)
                if plan is not None:
                    self._preempt(state, quota, rv, plan)
                    return None
        self._wait(rv, shortfall, pool_name)
        return (rv.group.eligibility.signature, rv.priority, rv.demand, shortfall)

    def _try_grant_anywhere(self, rv: RequestView) -> tuple[Shortfall, str] | None:
        """Grant on the first candidate pool that fits without preemption (DESIGN §2.7); else the
        reason it waits on its first choice."""
        first: tuple[Shortfall, str] | None = None
        for state, quota in rv.candidates:
            shortfall = self._try_grant(state, quota, rv, worded=first is None)
            if shortfall is None:
                return None
            if first is None:
                first = (shortfall, state.name)
        return first

    def _try_grant(
        self, state: PoolState, quota: SubjectQuota, rv: RequestView, worded: bool = True
    ) -> Shortfall | None:
        """Grant ``rv`` on ``state`` if it fits now; else why not, in words only if ``worded`` (a
        waiter is told about its first-choice pool, so the others' reasons would be thrown away)."""
        if state.spec.draining:
            return (WaitReason.POOL_DRAINING, f"pool {state.name!r} is draining")
        shortfall = quota_shortfall(state, quota, rv, worded=worded) or reservation_shortfall(
            state, quota, rv, self.now_ts
        )
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
        state.changed(quota)
        borrowed: dict[str, int] = {}
        for key, amount in rv.demand.items():
            if key not in state.capacity:
                continue
            used = quota.usage.get(key, 0) + quota.incoming.get(key, 0)  # held for its nominees: used
            reserved = quota.reserved.get(key, 0)
            part = max(0, used + amount - reserved) - max(0, used - reserved)
            if part:
                borrowed[key] = part
            state.free[key] -= amount
        for key, amount in rv.demand.items():
            quota.usage[key] = quota.usage.get(key, 0) + amount
        held: Held = ()
        if state.devices is not None and placement.items:
            state.devices.occupy(placement)
            held = state.devices.resolve(placement)
        grant = Grant(rv.id, state.name, Resources(rv.demand), Resources(borrowed), placement)
        self.decisions.grants.append(grant)
        self.granted += 1
        # A candidate for the waiters after it in this cycle, the most recently granted of all so far.
        view = LeaseView(
            rv.id,
            state.name,
            rv.subject,
            rv.demand,
            borrowed,
            rv.priority,
            rv.preemptible,
            self.now_ts,
            self.granted,
            rv.request.max_runtime_s,
            held=held,
            resolved_on=state.devices,
        )
        quota.leases.append(view)
        self.fresh[id(view)] = (grant, rv)

    def _preempt(self, state: PoolState, quota: SubjectQuota, rv: RequestView, plan: Plan) -> None:
        fresh = [lv for lv in plan.victims if id(lv) in self.fresh]
        if fresh:
            real = tuple(lv for lv in plan.victims if id(lv) not in self.fresh)
            self._withdraw(state, rv, plan, fresh)
            if not real:
                self._grant_in_their_place(state, quota, rv, fresh)
                return
            plan = Plan(real, plan.reason)
        state.changed(*(state.quotas[subject] for subject in {lv.subject for lv in plan.victims}))
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
        self._wait(rv, (WaitReason.PREEMPTING, waiting_for(plan.victims)), state.name)

    def _withdraw(self, state: PoolState, rv: RequestView, plan: Plan, fresh: list[LeaseView]) -> None:
        """Victims granted earlier in this cycle never reach the store: their grants are withdrawn and
        their requests wait at their place (a lease that never started is not requeued: no attempt)."""
        for lv in fresh:
            grant, displaced = self.fresh.pop(id(lv))
            self.decisions.grants.remove(grant)
            owner = state.quotas[lv.subject]
            owner.leases.remove(lv)
            add_into(owner.usage, lv.resources, -1)
            for key, amount in lv.resources.items():
                if key in state.capacity:
                    state.free[key] += amount
            if state.devices is not None and lv.held:
                state.devices.apply(lv.held, -1)
            state.changed(owner)
            message = f"its grant went to request {rv.id} of {rv.subject!r} in the same cycle ({plan.reason.value})"
            self._wait(displaced, (WaitReason.HELD_FOR_PREEMPTOR, message), state.name)

    def _grant_in_their_place(
        self, state: PoolState, quota: SubjectQuota, rv: RequestView, fresh: list[LeaseView]
    ) -> None:
        """Only this cycle's grants were in the way: the waiter is granted now. What they freed beyond
        the waiter's demand stays out of reach for the rest of the cycle (held), as a real victim's
        would until it releases, so that capacity only shrinks within a cycle (``_SubjectQueue.settle``)."""
        freed: dict[str, int] = {}
        for lv in fresh:
            add_into(freed, lv.resources)
        shortfall = self._try_grant(state, quota, rv)
        if shortfall is not None:  # the plan's trial found it fits: only a device map could disagree
            self._wait(rv, shortfall, state.name)
            return
        for key, amount in freed.items():
            if key in state.capacity:
                excess = min(amount - rv.demand.get(key, 0), state.free[key])
                if excess > 0:
                    state.free[key] -= excess
                    state.held[key] = state.held.get(key, 0) + excess

    def _hold(self, state: PoolState, quota: SubjectQuota, rv: RequestView, victims: list[LeaseView]) -> None:
        """Keep what is free now, and the devices the victims will free, for the waiter."""
        state.changed(quota)
        add_into(quota.incoming, rv.demand)
        for key, amount in rv.demand.items():
            if key in state.capacity:
                kept = min(max(state.free.get(key, 0), 0), amount)
                state.free[key] -= kept
                state.held[key] = state.held.get(key, 0) + kept
        if state.devices is None or not rv.shape.needs_devices:
            return
        freed = [lv.held for lv in victims]
        state.devices.release_all(freed)
        target = state.devices.place(rv.shape)
        for devices in freed:
            state.devices.apply(devices)
        if target is not None:
            state.devices.occupy(target)

    def _wait_all(self, proto: RequestView) -> None:
        assert proto.group.failure is not None, "settled groups carry their failure"
        reason, message = proto.group.failure
        ids = proto.group.ids
        ids.reverse()
        self.decisions.wait_runs.append(WaitRun(ids, reason, message, self.position + 1, proto.candidates[0][0].name))
        self.position += len(ids)
        proto.group.members = []
        proto.group.ids = []

    def _wait(self, rv: RequestView, shortfall: Shortfall, pool: str | None) -> None:
        self.position += 1
        self.decisions.wait_runs.append(WaitRun([rv.id], shortfall[0], shortfall[1], self.position, pool))


class _SubjectQueue:
    """One subject's waiting requests by group; the heads of its groups in §2.4's in-subject order
    (request priority, then submission time)."""

    def __init__(self) -> None:
        self._groups: dict[int, RequestView] = {}
        self._heads: list[tuple[int, float, str, int]] = []
        self._by_signature: dict[tuple[object, ...], list[int]] = {}

    def add(self, proto: RequestView) -> None:
        key = id(proto.group)
        self._groups[key] = proto
        signature = proto.group.eligibility.signature
        keys = self._by_signature.get(signature)
        if keys is None:
            self._by_signature[signature] = [key]
        else:
            keys.append(key)
        self._push(key)

    def _push(self, key: int) -> None:
        """Queue the group's next request by (request priority, submission time, id); the heap entry
        keeps its time and id, so that ordering and taking it need not read the request again."""
        proto = self._groups[key]
        group = proto.group
        request = group.members[-1]
        submitted = proto.submitted_ts if request is proto.request else request.submitted_at.timestamp()
        heapq.heappush(self._heads, (-proto.priority, submitted, group.ids[-1], key))

    def _drop_settled(self) -> None:
        """Settled groups leave their heads in the heap; they are dropped when they come up."""
        heads, groups = self._heads, self._groups
        while heads and heads[0][3] not in groups:
            heapq.heappop(heads)

    def __bool__(self) -> bool:
        self._drop_settled()
        return bool(self._heads)

    def order_key(self) -> OrderKey:
        """Where the subject's next request stands among all subjects' (``_order_key``)."""
        self._drop_settled()
        _, submitted, request_id, key = self._heads[0]
        return _order_key(self._groups[key], submitted, request_id)

    def pop(self) -> RequestView:
        self._drop_settled()
        _, submitted, _, key = heapq.heappop(self._heads)
        proto = self._groups[key]
        rv = proto.sibling(proto.group.members.pop(), submitted)
        proto.group.ids.pop()
        if proto.group.members:
            self._push(key)
        else:
            del self._groups[key]
        return rv

    def settle(self, failure: Failure) -> list[RequestView]:
        """Take out every group bound to repeat ``failure`` for the rest of the cycle: same
        constraints, no higher priority, at least as much asked (capacity only shrinks during a
        cycle). Only groups of the failure's signature can, so only they are looked at."""
        signature, priority, demand, shortfall = failure
        doomed: list[RequestView] = []
        kept: list[int] = []
        for key in self._by_signature.get(signature, ()):
            proto = self._groups.get(key)
            if proto is None:
                continue
            if proto.priority <= priority and dominates(proto.demand, demand):
                proto.group.failure = shortfall
                doomed.append(self._groups.pop(key))
            else:
                kept.append(key)
        self._by_signature[signature] = kept
        return doomed


def _queue_order(rv: RequestView) -> tuple[int, float, str]:
    """Request priority, then submission time, then id: the order groups are served in."""
    return (-rv.priority, rv.submitted_ts, rv.id)


def _order_key(rv: RequestView, submitted_ts: float, request_id: str) -> OrderKey:
    """DESIGN §2.4 across subjects, judged on the request's first-choice pool: policy priority, then
    waiters within their reserved share, then borrowers by weighted dominant share after the grant,
    then submission time. ``rv`` is any request of the group (they share demand and pools); the
    time and id are the request's own."""
    state, quota = rv.candidates[0]
    capacity = state.capacity
    dominant = 0.0
    in_share = True
    for key, amount in rv.demand.items():
        cap = capacity.get(key)
        if cap is None:
            continue
        # What the cycle holds for the subject's nominees is used (as in ``quota_miss``).
        borrowed = quota.usage.get(key, 0) + quota.incoming.get(key, 0) + amount - quota.reserved.get(key, 0)
        if borrowed > 0:
            in_share = False
            dominant = max(dominant, borrowed / cap)
    if in_share:
        return (-quota.priority, 0, 0.0, submitted_ts, request_id)
    for key, cap in capacity.items():
        if key not in rv.demand:
            borrowed = quota.usage.get(key, 0) + quota.incoming.get(key, 0) - quota.reserved.get(key, 0)
            if borrowed > 0 and cap > 0:
                dominant = max(dominant, borrowed / cap)
    share = math.inf if quota.weight == 0 else dominant / quota.weight
    return (-quota.priority, 1, share, submitted_ts, request_id)

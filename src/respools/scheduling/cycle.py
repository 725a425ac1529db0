"""One scheduling cycle: snapshot in, decisions out (DESIGN §2). Pure: no I/O, no clock.

The cycle (1) expires and revokes leases whose deadlines passed, (2) builds each pool's accounting,
(3) rejects requests that fit no pool, (4) serves nominated waiters first — capacity being freed by
preemption is held for them — and (5) walks the subjects' queue heads in the order of §2.4 through a
heap, granting, planning preemption, or recording why each request waits.

Cost is kept near-linear in the queue length and small per request:

- look-alike requests are grouped, and a group is classified and ordered as one; once a request has
  failed, its group's next ones (and look-alikes asking more that lack no other key) fail alike while
  none of their pools changed, and are answered in bulk (``_serve_queues``);
- each request is read once, in the order it sits in memory (``__dict__``, not pydantic attributes);
- what preemption planning derives from a pool or a subject's standing (who may be taken, what they
  hold, whether a shape fits the map) is cached until the cycle changes that pool or subject, which
  it marks with ``PoolState.changed``;
- a group whose planning found nothing to preempt is not planned for again when its pool changes in
  a way that cannot give it victims (``preemption.Futile``): most changes only take capacity away.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from respools.model import Lease, Placement, Request, RequestState, Resources, WaitReason
from respools.scheduling.decisions import Decisions, Expire, Grant, Overdue, Preempt, Reject, Revoke, WaitRun
from respools.scheduling.eligibility import ineligibility
from respools.scheduling.fit import Shortfall, place, quota_shortfall, reservation_shortfall
from respools.scheduling.memory import KeptEligibility, Memory
from respools.scheduling.placement import Held
from respools.scheduling.preemption import Futile, Plan, plan_preemption
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
Standing = tuple[int, int, float]
Entry = tuple[int, datetime, str, int]
"""A request's place in its subject's order (request priority, submission time, id), then its lane's
number in the subject's queue: never compared (ids are unique), it finds the lane from a heap's entry
without the entry holding the lane, which holds its entry (a reference cycle)."""
OrderKey = tuple[int, int, float, datetime, str]


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
        """This cycle's grants by their lease view's identity: candidates for later waiters (§2.5)."""
        self.granted = 0
        """Grants made so far, withdrawn ones included: the order of this cycle's lease views."""
        self.changes = 0
        """Decisions of the queue walk that changed a pool so far (see ``_Lane.settled``)."""
        self.withdrawn_from: set[str] = set()
        """Subjects whose grants the last decision withdrew."""
        self.futile: dict[tuple[int, str], Futile] = {}
        """Per group (by identity: groups live as long as the cycle) and pool, why planning found
        nothing to preempt, while it holds."""
        self.last_run: tuple[RequestGroup, WaitRun] | None = None
        """The group whose failure the last run of waits reports, so that its next requests join it."""
        self.standings: dict[tuple[int, int], tuple[int, Standing]] = {}
        """Per subject's quota and demand (by identity), its standing (``_standing``) and the quota's
        version it holds for: every look-alike group that asks alike of one first-choice pool shares it."""
        self.dominating: dict[tuple[int, int], bool] = {}
        """Whether one demand dominates another (by identity): asked again at every failure of a group."""
        self.marked: list[LeaseView] = []
        """Lease views this cycle told to go (``LeaseView.preempting``)."""
        self.alike: dict[tuple[int, int, object], tuple[int, bool]] = {}
        """Per larger demand, failed demand (by identity) and pools (names), whether a group asking the larger
        one fails alike (``_Queue.failed``), and ``changes`` when judged: it holds while no pool changes."""

    def standing(self, rv: RequestView) -> tuple[int, Standing]:
        """``_standing`` of the group of ``rv``, with the version of its subject's quota it holds for."""
        quota = rv.candidates[0][1]
        key = (id(quota), id(rv.demand))
        found = self.standings.get(key)
        if found is None or found[0] != quota.version:
            found = self.standings[key] = (quota.version, _standing(rv))
        return found

    def run(self) -> Decisions:
        s = self.snapshot
        books = s.books
        # With books, no lease has reached its expiry: only those under notice can have a deadline.
        live = self._expire(s.leases if books is None else books.preempting)
        assert books is None or len(live) == len(books.preempting), "the books' leases expire later"
        kept = self.memory.accounting if self.memory is not None else None
        self.pools = build_pools(s.now, s.pools, s.policies, s.reservations, live, kept, books)
        try:
            groups, nominated = self._eligible(s.requests)
            self._serve_nominated(nominated)
            self._serve_queues(groups)
        finally:
            if books is not None:
                for lv in self.marked:  # the caller's views: as they were (its leases are not preempting yet)
                    lv.preempting = False
        return self.decisions

    # -- (1) deadlines ------------------------------------------------------------------------------

    def _expire(self, leases: Iterable[Lease]) -> list[Lease]:
        now = self.snapshot.now
        live = []
        preempting = RequestState.PREEMPTING  # an enum member's lookup costs more than the comparison
        for lease in leases:
            fields = lease.__dict__  # every lease, every cycle: pydantic's attribute access costs more
            deadline = fields["preempt_deadline"]
            if fields["state"] == preempting and deadline and deadline <= now:
                # Past the deadline the lease is overdue and keeps its capacity: its workload may still
                # run on the GPUs. Only a holder silent for a full TTL is taken for gone here; a release
                # or a backend's confirmed stop ends it outside the cycle (DESIGN §2.8).
                if lease.expires_at <= now:
                    self.decisions.revocations.append(Revoke(lease.id))
                    continue
                if lease.overdue_since is None:
                    self.decisions.overdue.append(Overdue(lease.id))
                live.append(lease)
            elif fields["expires_at"] <= now:
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
        s = self.snapshot
        if s.buckets is None:
            members = bucketed(requests, memory.groups if memory is not None else GroupKeys())
        else:
            members = s.buckets
            if memory is not None and any(memory.groups.groups.get(k.key) is not k for k, _, _, _ in members.values()):
                raise ValueError("the snapshot's buckets were keyed by other group keys than the memory's")
        kept: dict[int, KeptEligibility] = (
            {} if memory is None else memory.eligibility_for(s.now, s.pools, s.policies, s.reservations)
        )
        heads: list[RequestView] = []
        nominated: list[RequestView] = []
        classified: dict[int, Eligibility] = {}
        shapes: dict[tuple[object, ...], Derived] = {}
        for known, bucket, ids, times in members.values():
            key = known.key
            rv = view_of(bucket[0], known, RequestGroup(_UNCLASSIFIED, bucket, ids, times), shapes)
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
                self.decisions.rejects.extend(Reject(request_id, eligibility.rejection) for request_id in ids)
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
            group = proto.group
            undecided = []
            for index, request in enumerate(group.members):
                rv = proto.sibling(request)
                if self._try_grant(state, quota, rv, worded=False) is None:
                    continue
                victims = [lv for lv in in_flight.get(rv.id, []) if lv.pool == state.name]
                if not victims:
                    undecided.append(index)
                    continue
                self._hold(state, quota, rv, victims)
                self._wait(rv, (WaitReason.PREEMPTING, waiting_for(victims)), state.name)
            group.members = [group.members[index] for index in undecided]
            group.ids = [group.ids[index] for index in undecided]
            group.times = [group.times[index] for index in undecided]

    # -- (5) the queues -----------------------------------------------------------------------------

    def _serve_queues(self, groups: list[RequestView]) -> None:
        """Subjects compete through their queue heads in §2.4's order, one request at a time.

        Once a request has failed, the next ones of its group fail alike for as long as none of their
        pools changed (the same request on the same books): they are *settled*, and taking their turn
        decides nothing. A subject's requests are taken in its own order, and the subject's turn comes
        when its next request is the least of all heads; with settled requests deciding nothing, the
        order in which the others are decided is that of each unsettled request at the running maximum
        of the keys up to it in its subject's order (``_Queue.turn``). So the heap holds one entry per
        subject, for its next unsettled request, and settled requests are answered in bulk, per group;
        a decision that changes a pool unsettles what failed there, for the subjects whose settled
        requests had not had their turn yet (``_Queue.settle_below``)."""
        queues: dict[str, _Queue] = {}
        for proto in groups:
            if proto.group.members:
                queue = queues.get(proto.subject)
                if queue is None:
                    queue = queues[proto.subject] = _Queue(self)
                queue.add(proto)
        heap: list[tuple[int, int, float, datetime, str, int, str]] = []
        """Per subject, its turn's key, flat (a key's items, then the stamp and the subject): a tuple of
        tuples would compare the keys twice, equal first, then less."""
        stamps: dict[str, int] = {}
        failed_on: dict[str, set[str]] = {}
        """Per pool, the subjects with a group that failed there (and may be unsettled by a change)."""

        def retarget(subject: str) -> None:
            stamp = stamps[subject] = stamps.get(subject, 0) + 1
            turn = queues[subject].turn()
            if turn is not None:
                heapq.heappush(heap, (turn[0], turn[1], turn[2], turn[3], turn[4], stamp, subject))

        for subject in queues:
            retarget(subject)
        while heap:
            top = heapq.heappop(heap)
            subject = top[6]
            if stamps[subject] != top[5]:
                continue
            turn: OrderKey = top[:5]
            queue = queues[subject]
            lane = queue.next_lane
            assert lane is not None, "a subject in the heap has an unsettled request"
            entry = lane.head
            proto = lane.proto
            before = lane.versions()
            shortfall = self._serve(queue.pop(lane))
            after = lane.versions()
            if shortfall is not None:
                self.last_run = (proto.group, self.decisions.wait_runs[-1])
                queue.failed(lane, shortfall, after)
                for state, _ in proto.candidates:
                    failed_on.setdefault(state.name, set()).add(subject)
            elif after != before:
                # The settled requests whose turn came before this decision are answered as they were.
                self.changes += 1
                old = {state.name: version for (state, _), version in zip(proto.candidates, before, strict=True)}
                queue.settle_before(entry, old)
                # A subject whose grant this decision withdrew uses less: its place in the order moves.
                touched, self.withdrawn_from = self.withdrawn_from, set()
                for (state, _), was, now in zip(proto.candidates, before, after, strict=True):
                    if was != now:
                        touched |= failed_on.get(state.name, set())
                for other in sorted(touched):  # a set of names: sorted, so positions do not follow the hash seed
                    if other != subject and other in queues:
                        queues[other].settle_below(turn, old)
                        retarget(other)
            retarget(subject)
        for queue in queues.values():
            queue.finish()

    def _serve(self, rv: RequestView) -> Shortfall | None:
        """Grant, preempt for, or fail ``rv``; the shortfall of a failure is returned, which the
        request's look-alikes meet too while its pools stay as they are."""
        first = self._try_grant_anywhere(rv)
        if first is None:
            return None
        shortfall, pool_name = first
        if shortfall[0] not in _NOT_PREEMPTABLE:
            futile, group = self.futile, id(rv.group)
            for state, quota in rv.candidates:
                if state.spec.draining:
                    continue
                known = futile.get((group, state.name))
                if known is not None and known.holds(state, quota, rv):
                    continue  # a look-alike found nothing to preempt here, and nothing that could undo it changed
                plan = plan_preemption(state, quota, rv)
                if isinstance(plan, Plan):
                    self._preempt(state, quota, rv, plan)
                    return None
                if plan is None:
                    futile.pop((group, state.name), None)
                else:
                    futile[(group, state.name)] = plan
        self._wait(rv, shortfall, pool_name)
        return shortfall

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
        quota.grants += 1
        state.gained(quota)
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
            self.marked.append(lv)
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
            self.withdrawn_from.add(lv.subject)
            owner.leases.remove(lv)
            add_into(owner.usage, lv.resources, -1)
            for key, amount in lv.resources.items():
                if key in state.capacity:
                    state.free[key] += amount
            if state.devices is not None and lv.held:
                state.devices.apply(lv.held, -1)
            state.changed(owner)
            state.grown += 1
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
        if _starts_borrowing(state, quota, rv.demand):
            state.gained(quota)
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

    def _wait_failing(self, proto: RequestView, ids: list[str]) -> None:
        """Requests of a group that failed, answered with its failure: they continue the group's last
        run of waits when nothing was answered in between."""
        group = proto.group
        assert group.failure is not None, "only a group that failed is answered so"
        self.position += len(ids)
        last = self.last_run
        runs = self.decisions.wait_runs
        if last is not None and last[0] is group and runs and runs[-1] is last[1]:
            last[1].request_ids.extend(ids)
            return
        reason, message = group.failure
        pool = group.eligibility.candidates[0][0].name  # (``proto.candidates``, without the property's call)
        run = WaitRun(ids, reason, message, self.position - len(ids) + 1, pool)
        runs.append(run)
        self.last_run = (group, run)

    def _wait(self, rv: RequestView, shortfall: Shortfall, pool: str | None) -> None:
        self.position += 1
        self.decisions.wait_runs.append(WaitRun([rv.id], shortfall[0], shortfall[1], self.position, pool))


class _Lane:
    """One group's requests in a subject's queue, oldest first; those before ``start`` are decided."""

    __slots__ = (
        "candidates",
        "changes",
        "cycle",
        "group",
        "head",
        "ids",
        "members",
        "number",
        "order_of",
        "proto",
        "quota",
        "rank",
        "standing",
        "start",
        "times",
    )

    def __init__(self, cycle: _Cycle, proto: RequestView, number: int) -> None:
        self.cycle = cycle
        self.number = number
        self.proto = proto
        self.group = group = proto.group
        self.members = group.members  # the group's own lists: the lane only moves ``start`` along them
        self.ids = group.ids
        self.times = group.times
        self.start = 0
        self.rank = rank = -proto.priority
        self.head: Entry = (rank, self.times[0], self.ids[0], number)
        """``entry(start)``, kept as ``start`` moves: the queue's every turn compares the lanes' heads."""
        self.candidates = candidates = proto.candidates  # the group's pools, and the subject's quota on each
        self.quota = candidates[0][1]
        self.standing = -1
        """The version of the subject's quota that ``order_of`` holds for (-1: none yet)."""
        self.order_of: Standing = (0, 0, 0.0)
        self.changes = -1
        """``cycle.changes`` when the group last failed or was last found settled: while it is the same,
        no pool changed since, and the group is settled."""

    def advance(self, end: int) -> None:
        """The members before ``end`` are decided."""
        self.start = end
        if end < len(self.ids):
            self.head = (self.rank, self.times[end], self.ids[end], self.number)

    def entry(self, index: int) -> Entry:
        """The member's place in its subject's order: request priority, submission time, id."""
        return (self.rank, self.times[index], self.ids[index], self.number)

    def key(self, index: int) -> OrderKey:
        """The member's place among all subjects' requests (§2.4); submission times compare as the
        timestamps they are, without converting each."""
        order = self.order()  # (items, not ``*order``: a tuple built at once, not through a list)
        return (order[0], order[1], order[2], self.times[index], self.ids[index])

    def order(self) -> Standing:
        """The first items of every member's key: the group's standing, while its subject's is the same."""
        if self.standing != self.quota.version:
            self.standing, self.order_of = self.cycle.standing(self.proto)
        return self.order_of

    def versions(self) -> tuple[int, ...]:
        """The state of the books of the group's pools: a failure holds while it is the same."""
        return tuple([state.version for state, _ in self.candidates])

    def settled(self) -> bool:
        """Whether the group's next requests fail as its last one did: no pool of theirs changed since.
        (The queue's hot loops read this inline; ``_Queue._settled_before`` asks it of the books before
        the last decision.)"""
        group = self.group
        if group.failure is None:
            return False
        changes = self.cycle.changes
        if self.changes == changes:
            return True
        if group.failed_at == self.versions():
            self.changes = changes  # known settled: it stays so until a decision changes a pool
            return True
        return False

    def fail(self, shortfall: Shortfall, versions: tuple[int, ...]) -> None:
        group = self.group
        group.failure, group.failed_at = shortfall, versions
        self.changes = self.cycle.changes

    def before(self, entry: Entry) -> int:
        """The end of the undecided members that come before ``entry`` in the subject's order."""
        if self.rank != entry[0]:
            return len(self.ids) if self.rank < entry[0] else self.start
        times, ids = self.times, self.ids
        end = bisect.bisect_left(times, entry[1], self.start)
        while end < len(ids) and times[end] == entry[1] and ids[end] < entry[2]:
            end += 1
        return end

    def below(self, key: OrderKey) -> int:
        """The end of the undecided members whose key is below ``key``."""
        order = self.order()
        if order != key[:3]:
            return len(self.ids) if order < key[:3] else self.start
        times, ids = self.times, self.ids
        end = bisect.bisect_left(times, key[3], self.start)
        while end < len(ids) and times[end] == key[3] and ids[end] < key[4]:
            end += 1
        return end


class _Queue:
    """One subject's undecided requests, one lane per group, taken in the subject's order (request
    priority, then submission time)."""

    def __init__(self, cycle: _Cycle) -> None:
        self.cycle = cycle
        self.lanes: list[_Lane] = []
        self.numbered: list[_Lane] = []
        """Every lane, by its number (the last item of its entries)."""
        self.next_lane: _Lane | None = None
        self.known = -1
        """``cycle.changes`` at the last turn. While it is the same no pool changed: lanes found settled
        stay so, none is answered, standings stay, and the head only moves on in the subject's order;
        so ``turn`` goes on from where it stopped instead of walking every lane again."""
        self.ahead: list[Entry] = []
        """A heap of the lanes not found settled, by their next request's entry (``_Lane.head``);
        settled ones leave it lazily, when they come first: none of them can come before the head."""
        self.behind: list[Entry] = []
        """A heap of the settled lanes, by their first request not counted in ``counted`` yet."""
        self.counted: OrderKey | None = None
        """The greatest key of the settled requests before the head so far."""
        self.alike: dict[tuple[object, ...], list[_Lane]] = {}
        """Lanes by eligibility signature: only lanes of one signature can fail alike."""

    def add(self, proto: RequestView) -> None:
        lane = _Lane(self.cycle, proto, len(self.numbered))
        self.numbered.append(lane)
        self.lanes.append(lane)
        self.alike.setdefault(proto.group.eligibility.signature, []).append(lane)

    def failed(self, lane: _Lane, shortfall: Shortfall, versions: tuple[int, ...]) -> None:
        """Settle ``lane``, and the subject's lanes that are bound to fail alike now: the same
        constraints and pools, no higher priority, at least as much asked, and short of free capacity
        on no other key (a key it alone lacks would bring the leases borrowing that key into its
        preemption); not where fair-share preemption may apply, whose greedy choice is not monotone."""
        lane.fail(shortfall, versions)
        proto = lane.proto
        if proto.preemptible and any(state.spec.fair_share_preemption for state, _ in proto.candidates):
            return
        demand, rank, candidates = proto.demand, lane.rank, lane.candidates
        pools = proto.group.eligibility.signature[0]  # the names of ``candidates``' pools
        changes, dominating, alike = self.cycle.changes, self.cycle.dominating, self.cycle.alike
        for other in self.alike[proto.group.eligibility.signature]:
            if other.changes == changes or other.rank < rank or other.start == len(other.ids):
                continue  # settled already (``lane`` too), of higher priority, or done
            group = other.group
            if group.failure is not None and group.failed_at == other.versions():  # ``settled``, inlined
                other.changes = changes
                continue
            more = other.proto.demand
            # Demands are shared by look-alike keys, and they and the pools' lists live as long as the
            # cycle; whether ``more`` comes short alike on the pools holds while none of them changes.
            trio = (id(more), id(demand), pools)
            found = alike.get(trio)
            if found is None or found[0] != changes:
                pair = (id(more), id(demand))
                larger = dominating.get(pair)
                if larger is None:
                    larger = dominating[pair] = dominates(more, demand)
                found = alike[trio] = (
                    changes,
                    larger and all(_short_alike(state, more, demand) for state, _ in candidates),
                )
            if found[1]:
                other.fail(shortfall, versions)

    def turn(self) -> OrderKey | None:
        """The key at which the subject's next unsettled request is decided: the greatest key of the
        subject's requests up to it, settled ones included (each must have had its turn first); None
        while every request left is settled. Settled requests already answered or passed only repeat
        keys below it."""
        changes = self.cycle.changes
        if self.known != changes:  # a pool changed since the last turn: every lane is judged again
            self.known, self.counted, self.behind = changes, None, []
            self.ahead = [lane.head for lane in self.lanes]
            heapq.heapify(self.ahead)
        ahead, behind, numbered = self.ahead, self.behind, self.numbered
        while ahead:
            lane = numbered[ahead[0][3]]
            if lane.changes != changes:
                group = lane.group
                if group.failure is None or group.failed_at != lane.versions():  # ``settled``, inlined
                    break
                lane.changes = changes
            # Settled (``_Lane.changes``: known so while no pool changed): its requests count from here.
            heapq.heappush(behind, heapq.heappop(ahead))
        else:
            self.next_lane = None
            return None
        self.next_lane = lane
        head = lane.head
        counted = self.counted
        while behind and behind[0] < head:
            other = numbered[behind[0][3]]
            end = other.before(head)
            key = other.key(end - 1)  # the latest of them: the greatest key of the group before the head
            if counted is None or key > counted:
                counted = key
            if end < len(other.ids):
                heapq.heapreplace(behind, other.entry(end))
            else:
                heapq.heappop(behind)
        self.counted = counted
        turn = lane.key(lane.start)
        return turn if counted is None or counted < turn else counted

    def pop(self, lane: _Lane) -> RequestView:
        index = lane.start
        lane.advance(index + 1)
        assert self.numbered[self.ahead[0][3]] is lane, "the lane of the last turn leads"
        if index + 1 == len(lane.ids):
            heapq.heappop(self.ahead)
            self.lanes.remove(lane)
        else:
            heapq.heapreplace(self.ahead, lane.head)
        return lane.proto.sibling(lane.members[index], lane.times[index].timestamp())

    def settle_before(self, entry: Entry, old: dict[str, int]) -> None:
        """Answer the requests settled before the last decision (``old``) that come before ``entry``."""
        for lane in self._settled_before(old):
            self._answer(lane, lane.before(entry))

    def settle_below(self, key: OrderKey, old: dict[str, int]) -> None:
        """Answer the settled requests whose turn came before the decision at ``key``: the subject's
        order up to its first request of a greater key (every one left when it has none)."""
        cut: Entry | None = None
        standing = key[:3]
        for lane in self.lanes:
            order = lane.order_of if lane.standing == lane.quota.version else lane.order()
            if order < standing:
                continue  # every member's key is below ``key``
            if order > standing:
                entry = lane.head  # none is
            else:
                end = lane.below(key)
                if end == len(lane.ids):
                    continue
                entry = lane.entry(end)
            if cut is None or entry < cut:
                cut = entry
        for lane in self._settled_before(old):
            self._answer(lane, len(lane.ids) if cut is None else lane.before(cut))

    def _settled_before(self, old: dict[str, int]) -> list[_Lane]:
        """The lanes that were settled before the last decision (``old``: the versions of the pools it
        changed, as they were), in order: those whose group failed while no pool changed since, as
        the decision found them (``_Lane.changes``), or on the same books as before it."""
        before = self.cycle.changes - 1
        found = []
        for lane in self.lanes:
            group = lane.group
            if group.failure is not None and (
                lane.changes == before
                or group.failed_at == tuple([old.get(state.name, state.version) for state, _ in lane.candidates])
            ):
                found.append(lane)
        return found

    def finish(self) -> None:
        """Answer every request left, all settled once no subject has an unsettled one, without moving
        each lane along and out of a queue that is done with."""
        changes, wait = self.cycle.changes, self.cycle._wait_failing
        for lane in self.lanes:
            assert lane.changes == changes or lane.settled(), "every request left is settled"
            wait(lane.proto, lane.ids[lane.start :])
        self.lanes.clear()

    def _answer(self, lane: _Lane, end: int) -> None:
        if end <= lane.start:
            return
        ids = lane.ids[lane.start : end]
        lane.advance(end)
        if end == len(lane.ids):
            self.lanes.remove(lane)
        self.cycle._wait_failing(lane.proto, ids)


def _queue_order(rv: RequestView) -> tuple[int, float, str]:
    """Request priority, then submission time, then id: the order groups are served in."""
    return (-rv.priority, rv.submitted_ts, rv.id)


def _standing(rv: RequestView) -> Standing:
    """DESIGN §2.4 across subjects, judged on the request's first-choice pool: policy priority, then
    waiters within their reserved share, then borrowers by weighted dominant share after the grant;
    submission time (``OrderKey``'s last items) breaks the rest. ``rv`` is any request of the group
    (they share demand and pools)."""
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
        return (-quota.priority, 0, 0.0)
    for key, cap in capacity.items():
        if key not in rv.demand:
            borrowed = quota.usage.get(key, 0) + quota.incoming.get(key, 0) - quota.reserved.get(key, 0)
            if borrowed > 0 and cap > 0:
                dominant = max(dominant, borrowed / cap)
    share = math.inf if quota.weight == 0 else dominant / quota.weight
    return (-quota.priority, 1, share)


def _starts_borrowing(state: PoolState, quota: SubjectQuota, demand: dict[str, int]) -> bool:
    """Whether holding ``demand`` for the subject makes it borrow on a key it did not: its leases that
    borrow there become candidates for other waiters (``preemption._borrowers``)."""
    usage, incoming, leaving, reserved = quota.usage, quota.incoming, quota.leaving, quota.reserved
    for key, amount in demand.items():
        if key in state.capacity:
            before = usage.get(key, 0) - leaving.get(key, 0) + incoming.get(key, 0)
            if before <= reserved.get(key, 0) < before + amount:
                return True
    return False


def _short_alike(state: PoolState, more: dict[str, int], less: dict[str, int]) -> bool:
    """Whether asking ``more`` comes short of free capacity on no key that asking ``less`` does not."""
    free, capacity = state.free, state.capacity
    for key, amount in more.items():
        if key in capacity:
            available = free.get(key, 0)
            if available < amount and available >= less.get(key, 0):
                return False
    return True

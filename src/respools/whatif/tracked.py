"""A ``Simulation`` that keeps its snapshot's lists up to date as it changes, for the replay.

``Simulation.snapshot`` filters every lease and request by state, every cycle: right for scenario
tests, which change states by hand between cycles, but a week's replay runs ten thousand cycles over a
queue of hundreds and as many leases, and that filter measured about a tenth of its time (issue 26).
The replay changes its simulation only through the methods below, so they can keep the live leases and
the queue as they go, in the order the filter would give them; a snapshot is then two list copies and
the core sees exactly what it saw before. The queue is also kept bucketed (``scheduling.queue.KeptQueue``)
and handed over so (``Snapshot.buckets``): bucketing the whole queue again every cycle was most of a
week's replay once the filter was gone.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from dataclasses import dataclass, field

from respools.model import Lease, Request, RequestState
from respools.scheduling import Decisions, Snapshot, schedule
from respools.scheduling.books import KeptLeases
from respools.scheduling.queue import KeptQueue
from respools.simulation import Simulation


@dataclass
class TrackedSimulation(Simulation):
    """A ``Simulation`` whose requests arrive through ``enqueue`` and leave through ``forget``, and
    whose lease states change only through ``apply``, ``release``, ``end_preempted`` and ``finished``:
    nothing may set a state by hand, or the kept lists go stale."""

    _live: dict[str, Lease] = field(default_factory=dict)
    """The leases in a live state (granted, active, preempting), in the order they were granted."""
    _queue: list[Request] = field(default_factory=list)
    """The pending requests in arrival order, the order of ``requests`` (a requeued request keeps its
    place there, so it goes back to its place here)."""
    _keys: list[int] = field(default_factory=list)
    """The arrival number of each request of ``_queue``, to find a request's place by bisection."""
    _arrival: dict[str, int] = field(default_factory=dict)
    _arrivals: itertools.count[int] = field(default_factory=itertools.count)
    _buckets: KeptQueue = field(init=False)
    """``_queue`` bucketed as the core buckets it, kept as it changes (the memory's group keys)."""
    _books: KeptLeases = field(default_factory=KeptLeases)
    """``_live`` summed per pool and subject as the core sums it, kept as it changes."""

    def __post_init__(self) -> None:
        self._buckets = KeptQueue(self._memory.groups)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            now=self.now,
            pools=self.pools,
            policies=self.policies,
            leases=list(self._live.values()),
            requests=list(self._queue),
            reservations=self.reservations,
            buckets=self._buckets.buckets(),
            books=self._books.books(self.now),
        )

    def step(self) -> Decisions:
        """One cycle, its decisions applied; unlike ``Simulation.step`` it keeps no history, which a
        week's replay does not read and would hold ten thousand cycles of."""
        decisions = schedule(self.snapshot(), self._memory)
        self.apply(decisions)
        return decisions

    def enqueue(self, request: Request) -> None:
        """A new pending request, behind every request queued so far."""
        assert request.state == RequestState.PENDING
        number = next(self._arrivals)
        self.requests[request.id] = request
        self._arrival[request.id] = number
        self._queue.append(request)
        self._keys.append(number)
        self._buckets.add(request)

    def forget(self, request_id: str) -> None:
        """A request that left the queue for good (done, rejected or out of retries)."""
        del self.requests[request_id], self._arrival[request_id]

    def apply(self, d: Decisions) -> None:
        super().apply(d)  # revocations requeue through ``end_preempted``
        for grant in d.grants:
            request = self.requests[grant.request_id]
            self._dequeue(request.id)
            assert request.lease_id is not None
            self._live[request.lease_id] = self.leases[request.lease_id]
            self._books.add(self.leases[request.lease_id])
        for reject in d.rejects:
            self._dequeue(reject.request_id)
        for expiry in d.expiries:
            self._end(expiry.lease_id)
        for preempt in d.preemptions:  # the waiter is nominated for the pool: its group key changed
            self._buckets.renominate(self.requests[preempt.request_id])
            for lease_id in preempt.lease_ids:  # now under notice
                self._books.changed(self.leases[lease_id])
        for overdue in d.overdue:
            self._books.changed(self.leases[overdue.lease_id])

    def release(self, lease_id: str) -> None:
        super().release(lease_id)  # a preempting lease ends through ``end_preempted``
        if lease_id in self._live:
            self._end(lease_id)

    def end_preempted(self, lease_id: str) -> None:
        super().end_preempted(lease_id)
        self._end(lease_id)
        request = self.requests[self.leases[lease_id].request_id]
        if request.state == RequestState.PENDING:
            number = self._arrival[request.id]
            at = bisect_left(self._keys, number)
            self._keys.insert(at, number)
            self._queue.insert(at, request)
            self._buckets.add(request)

    def finished(self, lease_id: str) -> None:
        """The holder's work is done: it releases; one under notice was done within its grace, so
        there is nothing to requeue."""
        lease = self.leases[lease_id]
        if lease.state == RequestState.PREEMPTING:
            lease.state = RequestState.RELEASED
            self._end(lease_id)
        else:
            self.release(lease_id)

    def _end(self, lease_id: str) -> None:
        del self._live[lease_id]
        self._books.discard(lease_id)

    def _dequeue(self, request_id: str) -> None:
        number = self._arrival[request_id]
        at = bisect_left(self._keys, number)
        assert self._keys[at] == number, f"{request_id} is not queued"
        del self._keys[at], self._queue[at]
        self._buckets.discard(request_id)

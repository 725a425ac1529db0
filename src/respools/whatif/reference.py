"""The work-conserving reference: what a scheduler that ignores every policy would keep busy.

It knows only the pools' capacities: a step starts the moment some pool it may use has room for it
(first come, first served, smaller steps overtaking a head that does not fit), runs its work
undisturbed and leaves. No reserved shares, limits, priorities, preemption, placement on hosts or
reconciler cycles. That makes it the yardstick for utilization: the busy GPU-seconds a pool would have
had with the same demand, against which respools' own figure is read. It is a reference rather than a
strict bound (greedy list scheduling is not optimal for every trace), which is why reports call the
ratio "of the work-conserving reference".
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from respools.model import UNBOUNDED_WHEN_UNMETERED, PolicySpec, PoolSpec
from respools.scheduling import pool_capacity
from respools.whatif.trace import TraceJob


@dataclass(frozen=True, slots=True)
class ReferenceRun:
    busy_gpu_s: dict[str, list[tuple[float, float, float]]]
    """Per pool, the (start, end, GPUs) of every step it ran."""
    end_s: float


def work_conserving(jobs: Sequence[TraceJob], pools: list[PoolSpec], policies: list[PolicySpec]) -> ReferenceRun:
    """Run ``jobs`` greedily on the pools' capacities; a step without ``pools`` may use every pool its
    subject has a policy on, as in the service."""
    capacity = {p.name: pool_capacity(p) for p in pools}
    free = {name: dict(vector) for name, vector in capacity.items()}
    by_subject: dict[str, list[str]] = {}
    for policy in sorted(policies, key=lambda p: -p.priority):
        by_subject.setdefault(policy.subject, []).append(policy.pool)
    # Steps of one shape (candidate pools, demand) are interchangeable for fitting: a queue per shape,
    # and only queue heads are looked at.
    queues: dict[tuple[tuple[str, ...], tuple[tuple[str, int], ...]], deque[TraceJob]] = {}
    busy: dict[str, list[tuple[float, float, float]]] = {name: [] for name in capacity}
    running: list[tuple[float, int, str, tuple[tuple[str, int], ...]]] = []
    arrivals = sorted(jobs, key=lambda job: job.submit_s)
    index, clock, seq = 0, 0.0, 0

    def shape(job: TraceJob) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
        candidates = tuple(job.pools) if job.pools else tuple(by_subject.get(job.subject, ()))
        demand = tuple(sorted((k, v * job.replicas) for k, v in job.resources.items()))
        return tuple(c for c in candidates if c in capacity and _could_hold(capacity[c], demand)), demand

    def start_what_fits() -> None:
        nonlocal seq
        heads = [(queue[0].submit_s, key) for key, queue in queues.items() if queue]
        heapq.heapify(heads)
        while heads:
            _, key = heapq.heappop(heads)
            candidates, demand = key
            queue = queues[key]
            pool = next((c for c in candidates if _fits(free[c], demand)), None)
            if pool is None:
                continue  # every step of this shape waits: the same demand does not fit either
            job = queue.popleft()
            for k, v in demand:
                if k in free[pool]:
                    free[pool][k] -= v
            end = clock + job.runtime_s
            busy[pool].append((clock, end, dict(demand).get("gpu", 0) / 1000))
            heapq.heappush(running, (end, seq, pool, demand))
            seq += 1
            if queue:
                heapq.heappush(heads, (queue[0].submit_s, key))

    while index < len(arrivals) or running:
        next_arrival = arrivals[index].submit_s if index < len(arrivals) else float("inf")
        if running and running[0][0] <= next_arrival:
            clock = running[0][0]
            while running and running[0][0] == clock:
                _, _, pool, demand = heapq.heappop(running)
                for k, v in demand:
                    if k in free[pool]:
                        free[pool][k] += v
        else:
            clock = next_arrival
            while index < len(arrivals) and arrivals[index].submit_s == clock:
                job = arrivals[index]
                key = shape(job)
                if key[0]:  # a step no pool can ever hold is not work anyone could do
                    queues.setdefault(key, deque()).append(job)
                index += 1
        start_what_fits()
    return ReferenceRun(busy, clock)


def _fits(vector: dict[str, int], demand: tuple[tuple[str, int], ...]) -> bool:
    """Unmetered keys are unbounded, as in the service (DESIGN §2.1)."""
    return all(vector.get(k, v) >= v for k, v in demand if k in vector)


def _could_hold(capacity: dict[str, int], demand: tuple[tuple[str, int], ...]) -> bool:
    """The pool meters every key asked for (but those unbounded when unmetered) and has room for it."""
    metered = all(k in capacity for k, _ in demand if k not in UNBOUNDED_WHEN_UNMETERED)
    return metered and _fits(capacity, demand)

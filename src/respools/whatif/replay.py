"""One trace against one set of definitions, on a simulated clock.

The state is a :class:`respools.simulation.Simulation` (``TrackedSimulation``, which keeps the queue and
the live leases as they change instead of filtering them each cycle: every change below goes through
its methods), and every decision comes from the scheduling core
(``schedule``) the service's reconciler runs; what this module adds is the lifecycle around it that
the service leaves to clients and time: steps arrive, run for their work, finish and release; a step
under notice checkpoints and steps aside (within its grace), and is requeued by the same rule the
service applies (``Simulation.end_preempted``: original position, ``attempt + 1`` up to
``max_retries``).

Cycles run on a grid of ``cycle_s`` simulated seconds, and only when something changed since the last
one (an arrival, a release, a window of a reservation opening or closing): the reconciler runs more
often, but a cycle with nothing new decides nothing new. That keeps a week of a large fleet within a
minute (the core is the cost, about a millisecond per cycle for a thousand GPUs), at the price of
waits measured to ``cycle_s``.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import IntEnum

from respools.model import GPU, MILLI, PolicySpec, PoolSpec, Request, RequestState, ReservationSpec, Resources
from respools.whatif.trace import TraceJob
from respools.whatif.tracked import TrackedSimulation

DEFAULT_START = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday: synthetic traces start their week there


@dataclass(frozen=True)
class ReplayOptions:
    start: datetime = DEFAULT_START
    cycle_s: float = 10.0
    step_aside_s: float = 5.0
    """How long a step under notice takes to checkpoint and release (capped by the pool's grace)."""
    until_s: float | None = None
    """Stop the clock here (default: when the last step has finished or can never run)."""


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """A lease's life, for accounting: GPUs are whole units (a fraction is 0.5), ``borrowed_gpu`` the
    part above the subject's reserved share when it was granted."""

    job_id: str
    subject: str
    pool: str
    start_s: float
    end_s: float
    gpu: float
    borrowed_gpu: float
    preempted: bool
    lost_s: float
    """Work thrown away when it was preempted: time since its last checkpoint."""


@dataclass(slots=True)
class JobRecord:
    job_id: str
    subject: str
    submit_s: float
    gpu: float
    waited_s: float = 0.0
    outcome: str = "unfinished"  # done | rejected | preempted (out of retries) | unfinished
    preemptions: int = 0
    reason: str | None = None


@dataclass
class RunResult:
    label: str
    pools: list[PoolSpec]
    policies: list[PolicySpec]
    jobs: list[JobRecord]
    leases: list[LeaseRecord]
    end_s: float
    cycles: int
    wall_s: float


class _Kind(IntEnum):
    # Order within one instant: work ends before new work arrives, and the cycle comes last.
    FINISH = 0
    STEP_ASIDE = 1
    ARRIVAL = 2
    CYCLE = 3


@dataclass(slots=True)
class _Live:
    job: TraceJob
    record: JobRecord
    request_id: str
    done_s: float = 0.0  # checkpointed work
    pending_since: float = 0.0
    lease_id: str | None = None
    started_s: float = 0.0
    epoch: int = 0


@dataclass
class _Replay:
    jobs: Sequence[TraceJob]
    sim: TrackedSimulation
    options: ReplayOptions
    progress: Callable[[float], None] | None = None
    clock: float = 0.0
    events: list[tuple[float, int, int, object]] = field(default_factory=list)
    live: dict[str, _Live] = field(default_factory=dict)  # by request id
    leases: list[LeaseRecord] = field(default_factory=list)
    records: list[JobRecord] = field(default_factory=list)
    next_cycle: float | None = None
    last_cycle: float = -math.inf
    cycles: int = 0
    pending: int = 0  # requests the next cycle can decide on: no cycle without one
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def push(self, at: float, kind: _Kind, payload: object = None) -> None:
        heapq.heappush(self.events, (at, kind, next(self._seq), payload))

    def run(self) -> float:
        for job in self.jobs:
            self.push(job.submit_s, _Kind.ARRIVAL, job)
        for window in self.sim.reservations:
            for edge in (window.start, window.end):
                offset = (edge - self.options.start).total_seconds()
                if offset >= 0:
                    self.push(offset, _Kind.CYCLE)
        limit = self.options.until_s if self.options.until_s is not None else math.inf
        while self.events and self.events[0][0] <= limit:
            at, kind, _, payload = heapq.heappop(self.events)
            if kind == _Kind.CYCLE and at == self.last_cycle:
                continue
            self.clock = at
            self.sim.now = self.options.start + timedelta(seconds=at)
            if kind == _Kind.ARRIVAL:
                assert isinstance(payload, TraceJob)
                self.arrive(payload)
            elif kind == _Kind.FINISH:
                assert isinstance(payload, tuple)
                self.finish(*payload)
            elif kind == _Kind.STEP_ASIDE:
                assert isinstance(payload, str)
                self.step_aside(payload)
            else:
                self.cycle()
            if self.progress is not None:
                self.progress(at)
        end = min(self.clock, limit) if self.events else self.clock
        for entry in self.live.values():
            if entry.lease_id is not None:
                self.account(entry, end, preempted=False)
            else:
                entry.record.waited_s += end - entry.pending_since
        return end

    def changed(self) -> None:
        """Something a waiter may be waiting for happened: run a cycle at the next grid point."""
        if self.next_cycle is not None:
            return
        grid = self.options.cycle_s
        at = math.ceil(self.clock / grid) * grid
        if at <= self.last_cycle:
            at = self.last_cycle + grid
        self.next_cycle = at
        self.push(at, _Kind.CYCLE)

    def arrive(self, job: TraceJob) -> None:
        rid = f"q{len(self.records):07d}"
        record = JobRecord(job.id, job.subject, job.submit_s, _gpus(job.resources) * job.replicas)
        self.records.append(record)
        self.sim.enqueue(
            Request(
                id=rid,
                subject=job.subject,
                resources=Resources(job.resources),
                replicas=job.replicas,
                preemptible=job.preemptible,
                priority=job.priority,
                pools=list(job.pools) if job.pools else None,
                max_retries=job.max_retries,
                submitted_at=self.sim.now,
            )
        )
        self.live[rid] = _Live(job, record, rid, pending_since=self.clock)
        self.pending += 1
        self.changed()

    def cycle(self) -> None:
        self.next_cycle = None
        self.last_cycle = self.clock
        if not self.pending:
            return
        self.cycles += 1
        decisions = self.sim.step()
        self.pending -= len(decisions.grants) + len(decisions.rejects)
        for grant in decisions.grants:
            entry = self.live[grant.request_id]
            entry.lease_id = self.sim.requests[grant.request_id].lease_id
            entry.started_s = self.clock
            entry.record.waited_s += self.clock - entry.pending_since
            self.push(self.clock + entry.job.runtime_s - entry.done_s, _Kind.FINISH, (grant.request_id, entry.epoch))
        for reject in decisions.rejects:
            entry = self.live.pop(reject.request_id)
            entry.record.outcome, entry.record.reason = "rejected", reject.reason
            self.sim.forget(reject.request_id)
        pools = {p.name: p for p in self.sim.pools}
        for preempt in decisions.preemptions:
            grace = pools[preempt.pool].preemption_grace_s
            for lease_id in preempt.lease_ids:
                self.push(self.clock + min(grace, self.options.step_aside_s), _Kind.STEP_ASIDE, lease_id)
        for revoke in decisions.revocations:  # a step that outstayed its grace: the core ended it
            self.ended_preempted(self.sim.leases[revoke.lease_id].request_id)

    def finish(self, request_id: str, epoch: int) -> None:
        entry = self.live.get(request_id)
        if entry is None or entry.epoch != epoch or entry.lease_id is None:
            return  # preempted since: this attempt never finishes
        lease_id = entry.lease_id
        self.account(entry, self.clock, preempted=False)
        self.sim.finished(lease_id)
        entry.record.outcome = "done"
        del self.live[request_id], self.sim.leases[lease_id]
        self.sim.forget(request_id)
        self.changed()

    def step_aside(self, lease_id: str) -> None:
        lease = self.sim.leases.get(lease_id)
        if lease is None or lease.state != RequestState.PREEMPTING:
            return
        self.sim.release(lease_id)
        self.ended_preempted(lease.request_id)

    def ended_preempted(self, request_id: str) -> None:
        """The lease ended preempted (``Simulation`` requeued it or gave up): account for it."""
        entry = self.live[request_id]
        assert entry.lease_id is not None
        lease_id = entry.lease_id
        progress = entry.done_s + self.clock - entry.started_s
        every = entry.job.checkpoint_s
        kept = math.floor(progress / every) * every if every else 0.0
        self.account(entry, self.clock, preempted=True, lost_s=progress - kept)
        entry.done_s = min(kept, entry.job.runtime_s)
        entry.record.preemptions += 1
        entry.lease_id, entry.epoch = None, entry.epoch + 1
        del self.sim.leases[lease_id]
        if self.sim.requests[request_id].state == RequestState.PENDING:
            entry.pending_since = self.clock
            self.pending += 1
        else:
            entry.record.outcome = "preempted"
            del self.live[request_id]
            self.sim.forget(request_id)
        self.changed()

    def account(self, entry: _Live, end_s: float, *, preempted: bool, lost_s: float = 0.0) -> None:
        assert entry.lease_id is not None
        lease = self.sim.leases[entry.lease_id]
        self.leases.append(
            LeaseRecord(
                job_id=entry.job.id,
                subject=lease.subject,
                pool=lease.pool,
                start_s=entry.started_s,
                end_s=end_s,
                gpu=_gpus(lease.resources),
                borrowed_gpu=_gpus(lease.borrowed),
                preempted=preempted,
                lost_s=lost_s,
            )
        )


def _gpus(vector: dict[str, int]) -> float:
    return vector.get(GPU, 0) / MILLI


def replay(
    jobs: Sequence[TraceJob],
    pools: list[PoolSpec],
    policies: list[PolicySpec],
    reservations: Sequence[ReservationSpec] = (),
    *,
    label: str = "",
    options: ReplayOptions | None = None,
    progress: Callable[[float], None] | None = None,
) -> RunResult:
    """Replay ``jobs`` (sorted by ``submit_s``) against the definitions; ``progress`` hears the clock."""
    options = options or ReplayOptions()
    sim = TrackedSimulation(
        pools=pools,
        policies=policies,
        reservations=list(reservations),
        now=options.start,
        lease_lifetime=timedelta(days=3650),  # steps in a trace never go silent
        record_waits=False,
    )
    began = time.perf_counter()
    run = _Replay(jobs, sim, options, progress)
    end = run.run()
    return RunResult(label, pools, policies, run.records, run.leases, end, run.cycles, time.perf_counter() - began)

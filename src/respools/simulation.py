"""An in-memory replay of the pool service: requests, leases and the decisions of the scheduling core
applied the way the reconciler commits them (grants become leases, victims go preempting, preempted
requests requeue with their original position). For what-if questions about pool definitions
("what would this policy change do to last week's queue?"), for tests of multi-cycle scenarios and for
benchmarks that need a fleet in steady state, without a server or a database.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from respools.model import (
    Lease,
    PolicySpec,
    PoolSpec,
    Request,
    RequestState,
    ReservationSpec,
)
from respools.scheduling import Decisions, Memory, Snapshot, schedule

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Simulation:
    """Pools, policies and reservations as defined; requests and leases as the service would hold
    them. ``step()`` runs one cycle and applies its decisions the way the reconciler commits them."""

    pools: list[PoolSpec]
    policies: list[PolicySpec]
    reservations: list[ReservationSpec] = field(default_factory=list)
    now: datetime = T0
    lease_lifetime: timedelta = timedelta(days=7)  # scenarios that test expiry set the lease's expiry
    record_waits: bool = True  # each waiter's reason, for readers of requests; a long replay skips it
    requests: dict[str, Request] = field(default_factory=dict)
    leases: dict[str, Lease] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    history: list[Decisions] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _memory: Memory = field(default_factory=Memory)

    def submit(self, subject: str, preemptible: bool = False, priority: int = 0, **spec: Any) -> str:
        """Queue a request; resource keys come as keyword arguments (``gpu=1``; ``mig__3g.40gb=1``
        for keys with dots) or as ``resources={...}``. Returns the request id."""
        resources = spec.pop("resources", None) or {
            k.replace("__", "."): spec.pop(k) for k in list(spec) if k not in _REQUEST_FIELDS
        }
        rid = f"r{next(self._ids):05d}"
        self.requests[rid] = Request.model_validate(
            {
                "id": rid,
                "subject": subject,
                "resources": resources,
                "preemptible": preemptible,
                "priority": priority,
                "submitted_at": self.now + timedelta(microseconds=int(rid[1:])),
                **spec,
            }
        )
        return rid

    def snapshot(self) -> Snapshot:
        # Every lease and request, every cycle: their states are read straight from ``__dict__``, and
        # the enum member looked up once (either costs more than the comparison itself).
        live, pending = _LIVE, RequestState.PENDING
        return Snapshot(
            now=self.now,
            pools=self.pools,
            policies=self.policies,
            leases=[lease for lease in self.leases.values() if lease.__dict__["state"] in live],
            requests=[r for r in self.requests.values() if r.__dict__["state"] == pending],
            reservations=self.reservations,
        )

    def step(self) -> Decisions:
        """One scheduling cycle on the current state, its decisions applied."""
        decisions = schedule(self.snapshot(), self._memory)
        self.history.append(decisions)
        self.apply(decisions)
        return decisions

    def apply(self, d: Decisions) -> None:
        pools = {p.name: p for p in self.pools}
        for seq, g in enumerate(d.grants):
            request = self.requests[g.request_id]
            lid = f"l{g.request_id[1:]}-{request.attempt}"
            self.leases[lid] = Lease(
                id=lid,
                request_id=request.id,
                subject=request.subject,
                pool=g.pool,
                stack=pools[g.pool].stack,
                resources=g.resources,
                borrowed=g.borrowed,
                placement=g.placement,
                state=RequestState.ACTIVE,
                preemptible=request.preemptible,
                priority=request.priority,
                attempt=request.attempt,
                granted_at=self.now,
                grant_seq=seq,
                started_at=self.now,
                expires_at=self.now + self.lease_lifetime,
                max_runtime_s=request.max_runtime_s,
            )
            request.state = RequestState.GRANTED
            request.lease_id = lid
            request.nominated_pool = None
        for r in d.rejects:
            self.requests[r.request_id].state = RequestState.REJECTED
            self.rejected[r.request_id] = r.reason
        for p in d.preemptions:
            for lid in p.lease_ids:
                lease = self.leases[lid]
                lease.state = RequestState.PREEMPTING
                lease.preempt_reason = p.reason
                lease.preempted_for = p.request_id
                lease.preempt_deadline = self.now + timedelta(seconds=pools[p.pool].preemption_grace_s)
            self.requests[p.request_id].nominated_pool = p.pool
        for run in d.wait_runs if self.record_waits else ():
            for request_id in run.request_ids:
                self.requests[request_id].wait_reason = run.reason
        for e in d.expiries:
            self.leases[e.lease_id].state = RequestState.EXPIRED
        for o in d.overdue:
            self.leases[o.lease_id].overdue_since = self.now
        for v in d.revocations:
            self.end_preempted(v.lease_id)

    def release(self, lease_id: str) -> None:
        """The holder lets go; a preempting holder's request requeues."""
        lease = self.leases[lease_id]
        if lease.state == RequestState.PREEMPTING:
            self.end_preempted(lease_id)
        else:
            lease.state = RequestState.RELEASED

    def end_preempted(self, lease_id: str) -> None:
        """Requeue-on-preemption: back to pending with the original submission time."""
        lease = self.leases[lease_id]
        lease.state = RequestState.PREEMPTED
        request = self.requests[lease.request_id]
        if request.attempt < request.max_retries:
            request.attempt += 1
            request.state = RequestState.PENDING
            request.lease_id = None
        else:
            request.state = RequestState.PREEMPTED

    def release_preempting(self) -> list[str]:
        """Every holder under notice steps aside now (as a well-behaved step does within its grace)."""
        ids = [lease.id for lease in self.leases.values() if lease.state == RequestState.PREEMPTING]
        for lid in ids:
            self.release(lid)
        return ids

    def settle(self, max_cycles: int = 50) -> int:
        """Run cycles, with preempted holders stepping aside at once, until a cycle preempts nothing;
        returns the number of cycles it took."""
        for cycle in range(1, max_cycles + 1):
            decisions = self.step()
            if not decisions.preemptions and not self.release_preempting():
                return cycle
        return max_cycles

    def lease_of(self, request_id: str) -> Lease:
        lid = self.requests[request_id].lease_id
        if lid is None:
            raise LookupError(f"{request_id} has no lease ({self.requests[request_id].state})")
        return self.leases[lid]

    def live(self, subject: str | None = None) -> list[Lease]:
        return [
            lease
            for lease in self.leases.values()
            if lease.state in _LIVE and (subject is None or lease.subject == subject)
        ]

    def held(self, subject: str, key: str = "gpu", pool: str | None = None) -> float:
        total = sum(lease.resources.get(key, 0) for lease in self.live(subject) if pool is None or lease.pool == pool)
        return total / 1000 if key == "gpu" else total


_LIVE = {RequestState.GRANTED, RequestState.ACTIVE, RequestState.PREEMPTING}
_REQUEST_FIELDS = {
    "replicas",
    "pools",
    "gpu_class",
    "selectors",
    "labels",
    "max_retries",
    "max_runtime_s",
    "idempotency_key",
}

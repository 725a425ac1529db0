"""A tiny in-memory store that applies the core's decisions the way the reconciler does, so that
scenarios can run several cycles (grant, preempt, release, requeue) without a server."""

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
from respools.scheduling import Decisions, Snapshot, schedule

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def pool(name: str, inventory: list[Any] | None = None, **capacity: float) -> PoolSpec:
    extra: dict[str, Any] = {}
    for key in ("fair_share_preemption", "forms", "gpu_class", "preemption_grace_s"):
        if key in capacity:
            extra[key] = capacity.pop(key)
    resources = {k.replace("__", "."): v for k, v in capacity.items()}
    return PoolSpec.model_validate({"name": name, "capacity": resources, "inventory": inventory, **extra})


def policy(
    subject: str,
    pool: str,
    priority: int = 0,
    reserved: dict[str, float] | None = None,
    limit: dict[str, float] | None = None,
    weight: float = 1.0,
) -> PolicySpec:
    return PolicySpec.model_validate(
        {
            "subject": subject,
            "pool": pool,
            "priority": priority,
            "reserved": reserved or {},
            "limit": limit,
            "weight": weight,
        }
    )


@dataclass
class Sim:
    pools: list[PoolSpec]
    policies: list[PolicySpec]
    reservations: list[ReservationSpec] = field(default_factory=list)
    now: datetime = T0
    requests: dict[str, Request] = field(default_factory=dict)
    leases: dict[str, Lease] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    history: list[Decisions] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def submit(self, subject: str, preemptible: bool = False, priority: int = 0, **spec: Any) -> str:
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
        return Snapshot(
            now=self.now,
            pools=self.pools,
            policies=self.policies,
            leases=[lease for lease in self.leases.values() if lease.state in _LIVE],
            requests=[r for r in self.requests.values() if r.state == RequestState.PENDING],
            reservations=self.reservations,
        )

    def step(self) -> Decisions:
        decisions = schedule(self.snapshot())
        self.history.append(decisions)
        self.apply(decisions)
        return decisions

    def apply(self, d: Decisions) -> None:
        pools = {p.name: p for p in self.pools}
        for g in d.grants:
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
                started_at=self.now,
                expires_at=self.now + timedelta(days=7),  # scenarios that test expiry set it
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
        for w in d.waits:
            self.requests[w.request_id].wait_reason = w.reason
        for e in d.expiries:
            self.leases[e.lease_id].state = RequestState.EXPIRED
        for v in d.revocations:
            self.end_preempted(v.lease_id)

    def release(self, lease_id: str) -> None:
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
        ids = [lease.id for lease in self.leases.values() if lease.state == RequestState.PREEMPTING]
        for lid in ids:
            self.release(lid)
        return ids

    def lease_of(self, request_id: str) -> Lease:
        lid = self.requests[request_id].lease_id
        assert lid is not None, f"{request_id} has no lease ({self.requests[request_id].state})"
        return self.leases[lid]

    def live(self, subject: str | None = None) -> list[Lease]:
        return [
            lease
            for lease in self.leases.values()
            if lease.state in _LIVE and (subject is None or lease.subject == subject)
        ]

    def held(self, subject: str, key: str = "gpu", pool: str | None = None) -> float:
        total = sum(
            lease.resources.get(key, 0) for lease in self.live(subject) if pool is None or lease.pool == pool
        )
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

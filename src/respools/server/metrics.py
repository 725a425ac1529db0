"""Prometheus metrics. Counters and histograms are per process (the leader's reconciler feeds them;
Prometheus sums replicas); pool gauges are read from the store at scrape time, so any replica answers
for the whole deployment."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from respools.model import GPU, MILLI
from respools.server.schemas import PoolStatus

if TYPE_CHECKING:
    from respools.server.reconciler.apply import CycleOutcome
    from respools.server.reconciler.cycle import CycleTimings

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


def _amount(key: str, value: int) -> float:
    return value / MILLI if key == GPU else float(value)


class PoolCollector(Collector):
    """Capacity, use, borrowing and queue length per pool, from :func:`pool_statuses`."""

    def __init__(self, statuses: Callable[[], list[PoolStatus]]) -> None:
        self._statuses = statuses

    def describe(self) -> list[Metric]:
        """Nothing to declare up front; this also keeps registration from querying the store."""
        return []

    def collect(self) -> Iterator[Metric]:
        try:
            statuses = self._statuses()
        except Exception:
            log.warning("pool gauges unavailable this scrape", exc_info=True)
            return
        families = {
            "capacity": GaugeMetricFamily("respools_pool_capacity", "Effective capacity", labels=["pool", "resource"]),
            "in_use": GaugeMetricFamily("respools_pool_in_use", "Held by live leases", labels=["pool", "resource"]),
            "borrowed": GaugeMetricFamily(
                "respools_pool_borrowed", "Held beyond reserved shares", labels=["pool", "resource"]
            ),
        }
        queue = GaugeMetricFamily("respools_queue_length", "Pending requests waiting on the pool", labels=["pool"])
        leases = GaugeMetricFamily("respools_live_leases", "Granted, active or preempting leases", labels=["pool"])
        preempting = GaugeMetricFamily("respools_preempting_leases", "Leases under preemption notice", labels=["pool"])
        overdue = GaugeMetricFamily(
            "respools_overdue_leases",
            "Preempting leases past their grace deadline, still holding their capacity until a release, a "
            "confirmed stop or a TTL of silence",
            labels=["pool"],
        )
        for status in statuses:
            for name, family in families.items():
                vector: dict[str, int] = getattr(status, name)
                for key, value in sorted(vector.items()):
                    family.add_metric([status.name, key], _amount(key, value))
            queue.add_metric([status.name], status.waiting_requests)
            leases.add_metric([status.name], status.live_leases)
            preempting.add_metric([status.name], status.preempting_leases)
            overdue.add_metric([status.name], status.overdue_leases)
        yield from families.values()
        yield from (queue, leases, preempting, overdue)


class Metrics:
    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created series only double the output
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.grants = Counter("respools_grants", "Leases granted", ["pool"], registry=r)
        self.grant_latency = Histogram(
            "respools_grant_latency_seconds",
            "Time from entering the queue to the grant",
            ["pool"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.preemptions = Counter(
            "respools_preemptions", "Leases given preemption notice", ["pool", "reason"], registry=r
        )
        self.rejections = Counter("respools_rejections", "Requests rejected as never fitting", registry=r)
        self.expiries = Counter("respools_expiries", "Leases expired (heartbeats stopped)", registry=r)
        self.revocations = Counter(
            "respools_revocations", "Overdue leases ended because their holder was silent for a full TTL", registry=r
        )
        self.overdue = Counter(
            "respools_leases_overdue",
            "Preempting leases that passed their grace deadline unreleased",
            ["pool"],
            registry=r,
        )
        self.cycle_seconds = Histogram(
            "respools_reconcile_cycle_seconds", "Duration of a reconciler cycle", buckets=LATENCY_BUCKETS, registry=r
        )
        self.cycle_failures = Counter("respools_reconcile_failures", "Reconciler cycles that failed", registry=r)
        self.leader = Gauge("respools_reconciler_leader", "1 while this replica leads the reconciler", registry=r)
        self.long_polls = Gauge(
            "respools_long_polls",
            "Long-polls and many-request watches waiting in this process (each holds a connection)",
            registry=r,
        )
        self.http_requests = Counter(
            "respools_http_requests", "HTTP requests answered", ["method", "route", "status"], registry=r
        )

    def add_pool_collector(self, statuses: Callable[[], list[PoolStatus]]) -> None:
        self.registry.register(PoolCollector(statuses))

    def observe_cycle(self, outcome: CycleOutcome, seconds: float, timings: CycleTimings) -> None:
        self.cycle_seconds.observe(seconds)
        for grant, waited in outcome.grants:
            self.grants.labels(grant.pool).inc()
            self.grant_latency.labels(grant.pool).observe(waited)
        for pool, reason in outcome.preempted:
            self.preemptions.labels(pool, reason.value).inc()
        if outcome.rejected:
            self.rejections.inc(outcome.rejected)
        if outcome.expired:
            self.expiries.inc(outcome.expired)
        if outcome.revoked:
            self.revocations.inc(len(outcome.revoked))
        for lease, _ in outcome.overdue:
            self.overdue.labels(lease.pool).inc()

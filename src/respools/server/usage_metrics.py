"""``respools_usage_gpu_seconds_total{subject,pool,kind}``: the usage ledger as Prometheus counters.

Computed from the lease rows at scrape time (as the pool gauges are), so every replica exposes the same
totals and a restart loses nothing: a per-process counter fed by the leader would reset on restart and
differ between replicas. Running leases count up to the scrape, so the series only ever grow. Query it
with ``max by (subject, pool, kind)`` across replicas, not ``sum``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from respools.model import GPU, MILLI
from respools.server import usage
from respools.server.db.database import Database
from respools.server.usage_query import usage_totals

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
KINDS = ("in_share", "borrowed", "preempted", "lost")


class UsageCollector(Collector):
    def __init__(self, db: Database) -> None:
        self._db = db

    def describe(self) -> list[Metric]:
        return [self._family()]

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "respools_usage_gpu_seconds",
            "GPU-seconds held by leases (in_share, borrowed; preempted: held by leases that ended preempted; "
            "lost: of preempted, since their last checkpoint)",
            labels=["subject", "pool", "kind"],
        )

    def collect(self) -> Iterator[Metric]:
        now = usage.now_utc()
        by = [usage.Dimension.SUBJECT, usage.Dimension.POOL]
        groups = self._db.read(lambda conn: usage_totals(conn, EPOCH, now, now, None, by))
        family = self._family()
        for (subject, pool), totals in sorted(groups.items()):
            for kind in KINDS:
                seconds = getattr(totals, kind).get(GPU, 0.0) / MILLI
                family.add_metric([subject, pool, kind], seconds)
        yield family

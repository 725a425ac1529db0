"""The chargeback table: GPU-hours per team and pool over a window, in share and borrowed, with a cost
where a price per GPU-hour is given for the pool. The Usage page shows it and offers it as CSV.

Read from the same ledger as ``GET /v1/usage`` (:mod:`respools.server.usage`), so the page, the
download, the API and the Prometheus counters agree on every replica; the page's table and the CSV are
built from the same :func:`charge_rows`, so they cannot disagree either."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from respools.model import GPU, MILLI
from respools.server import usage
from respools.server.errors import invalid

HEADER = [
    "subject",
    "pool",
    "gpu_hours_in_share",
    "gpu_hours_borrowed",
    "gpu_hours_preempted",
    "gpu_hours_lost",
    "gpu_hours",
    "cost",
]
MAX_PRICE = 1e9


@dataclass(frozen=True, slots=True)
class ChargeRow:
    """One team's GPU-hours in one pool."""

    subject: str
    pool: str
    in_share: float
    borrowed: float
    preempted: float
    lost: float
    """Of ``preempted``: since the leases' last checkpoints."""

    @property
    def total(self) -> float:
        return self.in_share + self.borrowed

    def cost(self, prices: Mapping[str, float]) -> float | None:
        price = prices.get(self.pool)
        return None if price is None else self.total * price


def parse_prices(values: list[str]) -> dict[str, float]:
    """``pool=price`` pairs (price per GPU-hour, not negative)."""
    prices: dict[str, float] = {}
    for value in values:
        pool, _, amount = value.partition("=")
        try:
            price = float(amount)
        except ValueError:
            price = -1.0
        if not pool or not 0 <= price < MAX_PRICE:
            raise invalid(f"price: {value!r} is not POOL=PRICE with a price per GPU-hour >= 0", "price")
        prices[pool] = price
    return prices


def _hours(vector: dict[str, float]) -> float:
    return vector.get(GPU, 0.0) / MILLI / 3600


def charge_rows(groups: Mapping[tuple[object, ...], usage.Totals]) -> list[ChargeRow]:
    """One row per group of ``groups`` keyed by ``(subject, pool)``, sorted by subject then pool."""
    rows = [
        ChargeRow(str(subject), str(pool), _hours(t.in_share), _hours(t.borrowed), _hours(t.preempted), _hours(t.lost))
        for (subject, pool), t in groups.items()
    ]
    return sorted(rows, key=lambda r: (r.subject, r.pool))


def chargeback_csv(rows: Sequence[ChargeRow], prices: Mapping[str, float]) -> str:
    """``rows`` as CSV; the cost is empty where the pool has no price."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(HEADER)
    for row in rows:
        cost = row.cost(prices)
        hours = (row.in_share, row.borrowed, row.preempted, row.lost, row.total)
        writer.writerow([row.subject, row.pool, *(f"{h:.4f}" for h in hours), "" if cost is None else f"{cost:.2f}"])
    return out.getvalue()


def window(since: datetime, until: datetime) -> None:
    if since >= until:
        raise invalid("since must be before until", "since")

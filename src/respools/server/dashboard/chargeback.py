"""The chargeback CSV the dashboard offers for download: GPU-hours per team and pool over a window, in
share and borrowed, with a cost where a price per GPU-hour is given for the pool.

Read from the same ledger as ``GET /v1/usage`` (:mod:`respools.server.usage`), so the download, the API
and the Prometheus counters agree on every replica."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from datetime import datetime

from respools.model import GPU, MILLI
from respools.server import usage
from respools.server.errors import invalid

HEADER = ["subject", "pool", "gpu_hours_in_share", "gpu_hours_borrowed", "gpu_hours_preempted", "gpu_hours", "cost"]


def parse_prices(values: list[str]) -> dict[str, float]:
    """``pool=price`` pairs (price per GPU-hour, not negative)."""
    prices: dict[str, float] = {}
    for value in values:
        pool, _, amount = value.partition("=")
        try:
            price = float(amount)
        except ValueError:
            price = -1.0
        if not pool or not 0 <= price < 1e9:
            raise invalid(f"price: {value!r} is not POOL=PRICE with a price per GPU-hour >= 0", "price")
        prices[pool] = price
    return prices


def chargeback_csv(groups: Mapping[tuple[object, ...], usage.Totals], prices: Mapping[str, float]) -> str:
    """One line per (subject, pool) of ``groups`` keyed by ``(subject, pool)``; cost empty when unpriced."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(HEADER)
    for (subject, pool), totals in sorted(groups.items(), key=lambda item: tuple(map(str, item[0]))):
        in_share = totals.in_share.get(GPU, 0.0) / MILLI / 3600
        borrowed = totals.borrowed.get(GPU, 0.0) / MILLI / 3600
        preempted = totals.preempted.get(GPU, 0.0) / MILLI / 3600
        price = prices.get(str(pool))
        cost = "" if price is None else f"{(in_share + borrowed) * price:.2f}"
        row = [subject, pool, *(f"{h:.4f}" for h in (in_share, borrowed, preempted, in_share + borrowed)), cost]
        writer.writerow(row)
    return out.getvalue()


def window(since: datetime, until: datetime) -> None:
    if since >= until:
        raise invalid("since must be before until", "since")

"""Builders for scenario tests; the multi-cycle replay itself is ``respools.simulation``."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from respools.model import PolicySpec, PoolSpec
from respools.scheduling import Snapshot
from respools.simulation import T0, Simulation

Sim = Simulation
__all__ = ["T0", "Sim", "as_seen", "play", "policy", "pool"]


def pool(
    name: str,
    inventory: list[Any] | None = None,
    *,
    forms: list[str] | None = None,
    gpu_class: str | None = None,
    fair_share_preemption: bool = False,
    preemption_grace_s: float = 60.0,
    **capacity: float,
) -> PoolSpec:
    """A pool; capacity keys as keyword arguments, ``mig__3g.40gb=2`` for keys with dots."""
    return PoolSpec.model_validate(
        {
            "name": name,
            "capacity": {k.replace("__", "."): v for k, v in capacity.items()},
            "inventory": inventory,
            "forms": forms,
            "gpu_class": gpu_class,
            "fair_share_preemption": fair_share_preemption,
            "preemption_grace_s": preemption_grace_s,
        }
    )


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


def play(sim: Sim, kind: str, rnd: random.Random) -> None:
    """The events every random history shares: a holder releases (``release``), holders under notice
    step aside (``yield``), the clock moves on (``tick``); any other kind changes nothing here."""
    if kind == "release" and sim.live():
        sim.release(rnd.choice(sorted(lease.id for lease in sim.live())))
    elif kind == "yield":
        sim.release_preempting()
    elif kind == "tick":
        sim.now += timedelta(seconds=1)


def as_seen(snapshot: Snapshot) -> Snapshot:
    """The sim mutates its leases, requests and definition lists as it goes; keep what the cycle saw."""
    return Snapshot(
        now=snapshot.now,
        pools=list(snapshot.pools),
        policies=list(snapshot.policies),
        leases=[lease.model_copy(deep=True) for lease in snapshot.leases],
        requests=[request.model_copy(deep=True) for request in snapshot.requests],
        reservations=list(snapshot.reservations),
    )

"""Builders for scenario tests; the multi-cycle replay itself is ``respools.simulation``."""

from __future__ import annotations

from typing import Any

from respools.model import PolicySpec, PoolSpec
from respools.simulation import T0, Simulation

Sim = Simulation
__all__ = ["T0", "Sim", "policy", "pool"]


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

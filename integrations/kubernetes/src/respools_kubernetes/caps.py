"""Environment variables a pod needs for its lease: the lease id, and the caps of an unenforced fraction.

The names are the local backend's (``respools.backends.local.caps``), so a step reads its share the same way
wherever it runs. Run:ai/KAI fractions are scheduling-only (nothing stops the pod from taking the whole
GPU's memory), so the pod carries its share in every form a framework honours. HAMi enforces memory itself
and shows the pod a GPU whose total memory *is* the cap, so a HAMi pod gets no framework caps: a memory
fraction of 0.25 there would cap the pod at a quarter of its quarter.
"""

from __future__ import annotations

import math

from respools.model import MILLI
from respools_kubernetes.demand import Fraction

LEASE_ID_ENV = "RESPOOLS_LEASE_ID"
FRACTION_ENV = "RESPOOLS_GPU_FRACTION"
MEMORY_MB_ENV = "RESPOOLS_GPU_MEMORY_MB"
MEMORY_FRACTION_ENV = "RESPOOLS_GPU_MEMORY_FRACTION"
XLA_FRACTION_ENV = "XLA_PYTHON_CLIENT_MEM_FRACTION"
XLA_PREALLOCATE_ENV = "XLA_PYTHON_CLIENT_PREALLOCATE"
TF_GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"

_DECIMALS = 4


def format_share(value: float) -> str:
    """Rounded *down* to 4 decimals (a cap rounded up could exceed the share): 0.25, 0.3333, 1."""
    floored = math.floor(round(value * 10**_DECIMALS, 6)) / 10**_DECIMALS
    return f"{floored:.{_DECIMALS}f}".rstrip("0").rstrip(".") or "0"


def memory_share(fraction: Fraction) -> float:
    """The fraction's share of its GPU's memory: the explicit cap where both sizes are known, else its
    compute share."""
    if fraction.memory_mb is not None and fraction.gpu_memory_mb:
        return min(fraction.memory_mb / fraction.gpu_memory_mb, 1.0)
    return fraction.milli / MILLI


def unenforced_fraction_env(fraction: Fraction) -> dict[str, str]:
    """Caps for a fraction that the cluster schedules but does not enforce."""
    share = format_share(memory_share(fraction))
    env = {
        FRACTION_ENV: format_share(fraction.milli / MILLI),
        MEMORY_FRACTION_ENV: share,
        XLA_FRACTION_ENV: share,
        XLA_PREALLOCATE_ENV: "false",
        TF_GROWTH_ENV: "true",
    }
    if fraction.memory_mb is not None:
        env[MEMORY_MB_ENV] = str(fraction.memory_mb)
    return env

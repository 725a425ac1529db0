"""Memory and compute caps for GPU fractions, as the environment variables the common frameworks read.

A fraction shares a GPU with other leases, and nothing in CUDA stops one process from taking all its
memory. So a fractional lease carries its share in every form a process might honour: our own
``RESPOOLS_GPU_*`` variables (read by :mod:`torch_cap` / :mod:`tf_cap` and by anyone's code), JAX/XLA's
memory fraction, TensorFlow's grow-on-demand switch, and, where an MPS daemon runs, MPS's compute and
pinned-memory limits, which the driver enforces. The agent's watchdog catches whoever ignores them all.

Framework variables hold one value for every visible device, so a lease mixing whole GPUs and fractions
gets the strictest value there; the per-device lists carry the exact caps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from respools.backends.local.mps import PIPE_DIR_ENV, MpsState
from respools.model import MILLI, PlacementItem

FRACTION_ENV = "RESPOOLS_GPU_FRACTION"
"""Compute share of the strictest capped device, e.g. ``0.25``."""
MEMORY_MB_ENV = "RESPOOLS_GPU_MEMORY_MB"
"""Memory cap (MiB) of the strictest capped device, where it is known."""
MEMORY_FRACTION_ENV = "RESPOOLS_GPU_MEMORY_FRACTION"
"""Memory cap as a share of the device's memory, strictest device."""
MEMORY_FRACTIONS_ENV = "RESPOOLS_GPU_MEMORY_FRACTIONS"
"""Per visible device (``CUDA_VISIBLE_DEVICES`` order), comma-separated; ``1`` for an uncapped device."""
MEMORY_MB_PER_DEVICE_ENV = "RESPOOLS_GPU_MEMORY_MB_PER_DEVICE"
"""Per visible device, comma-separated MiB; empty where uncapped or unknown."""

XLA_FRACTION_ENV = "XLA_PYTHON_CLIENT_MEM_FRACTION"
XLA_PREALLOCATE_ENV = "XLA_PYTHON_CLIENT_PREALLOCATE"
TF_GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"
MPS_THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"

_DECIMALS = 4


@dataclass(frozen=True)
class DeviceCap:
    """The share of one visible device that a lease may use."""

    milli: int
    memory_fraction: float
    memory_mb: int | None

    @property
    def capped(self) -> bool:
        return self.milli < MILLI or self.memory_fraction < 1


UNCAPPED = DeviceCap(milli=MILLI, memory_fraction=1.0, memory_mb=None)


def memory_cap_mb(item: PlacementItem, total_mb: int | None) -> int | None:
    """The memory a placement item may use: its explicit cap, else its share of the device's memory."""
    if item.memory_mb is not None:
        return item.memory_mb if total_mb is None else min(item.memory_mb, total_mb)
    if total_mb is None:
        return None
    return total_mb * item.milli // MILLI


def device_cap(item: PlacementItem, total_mb: int | None) -> DeviceCap:
    """Cap for one item. MIG slices are isolated by the hardware and whole GPUs are not shared: uncapped."""
    if item.mig_uuid is not None or (item.milli >= MILLI and item.memory_mb is None):
        return UNCAPPED
    cap_mb = memory_cap_mb(item, total_mb)
    fraction = cap_mb / total_mb if cap_mb is not None and total_mb else min(item.milli, MILLI) / MILLI
    return DeviceCap(milli=min(item.milli, MILLI), memory_fraction=min(fraction, 1.0), memory_mb=cap_mb)


def format_fraction(value: float) -> str:
    """Round *down* (a cap rounded up could exceed the share) to 4 decimals: 0.2441, 0.25, 1."""
    floored = math.floor(round(value * 10**_DECIMALS, 6)) / 10**_DECIMALS
    return f"{floored:.{_DECIMALS}f}".rstrip("0").rstrip(".") or "0"


def cap_env(caps: Sequence[DeviceCap], mps: MpsState) -> dict[str, str]:
    """Environment variables for the visible devices ``caps`` (in ``CUDA_VISIBLE_DEVICES`` order)."""
    capped = [cap for cap in caps if cap.capped]
    if not capped:
        return {}
    milli = min(cap.milli for cap in capped)
    memory_fraction = min(cap.memory_fraction for cap in capped)
    env = {
        FRACTION_ENV: format_fraction(milli / MILLI),
        MEMORY_FRACTION_ENV: format_fraction(memory_fraction),
        MEMORY_FRACTIONS_ENV: ",".join(format_fraction(cap.memory_fraction) for cap in caps),
        XLA_FRACTION_ENV: format_fraction(memory_fraction),
        XLA_PREALLOCATE_ENV: "false",
        TF_GROWTH_ENV: "true",
    }
    known_mb = [cap.memory_mb for cap in capped if cap.memory_mb is not None]
    if known_mb:
        env[MEMORY_MB_ENV] = str(min(known_mb))
        env[MEMORY_MB_PER_DEVICE_ENV] = ",".join(
            str(cap.memory_mb) if cap.capped and cap.memory_mb is not None else "" for cap in caps
        )
    if mps.running:
        env[MPS_THREADS_ENV] = str(max(1, milli * 100 // MILLI))
        limits = [
            f"{ordinal}={cap.memory_mb}M"
            for ordinal, cap in enumerate(caps)
            if cap.capped and cap.memory_mb is not None
        ]
        if limits:
            env[MPS_MEMORY_ENV] = ",".join(limits)
        if mps.custom_pipe_dir:
            env[PIPE_DIR_ENV] = str(mps.pipe_dir)
    return env


def _parse_list(environ: Mapping[str, str], name: str) -> list[str] | None:
    raw = environ.get(name)
    return None if raw is None or not raw.strip() else [part.strip() for part in raw.split(",")]


def read_memory_fractions(environ: Mapping[str, str], device_count: int) -> list[float]:
    """Memory share per visible device as a process reads it back (``1.0`` = uncapped).

    Prefers the per-device list and falls back to the single strictest value for every device, so a
    process started by hand with only ``RESPOOLS_GPU_MEMORY_FRACTION`` is capped too."""
    per_device = _parse_list(environ, MEMORY_FRACTIONS_ENV)
    single = environ.get(MEMORY_FRACTION_ENV, "").strip()
    try:
        default = float(single) if single else 1.0
        values = [float(v) for v in per_device] if per_device is not None else []
    except ValueError:
        raise ValueError(
            f"{MEMORY_FRACTIONS_ENV}/{MEMORY_FRACTION_ENV} must be numbers between 0 and 1, "
            f"got {environ.get(MEMORY_FRACTIONS_ENV)!r} / {single!r}"
        ) from None
    fractions = (values + [default] * device_count)[:device_count]
    if any(not 0 < f <= 1 for f in fractions):
        raise ValueError(f"GPU memory fractions must be in (0, 1], got {fractions}")
    return fractions


def read_memory_mb(environ: Mapping[str, str], device_count: int) -> list[int | None]:
    """Memory cap in MiB per visible device (``None`` = uncapped or unknown), as a process reads it."""
    per_device = _parse_list(environ, MEMORY_MB_PER_DEVICE_ENV)
    single = environ.get(MEMORY_MB_ENV, "").strip()
    try:
        default = int(single) if single else None
        values = [int(v) if v else None for v in per_device] if per_device is not None else []
    except ValueError:
        raise ValueError(
            f"{MEMORY_MB_PER_DEVICE_ENV}/{MEMORY_MB_ENV} must be whole MiB, "
            f"got {environ.get(MEMORY_MB_PER_DEVICE_ENV)!r} / {single!r}"
        ) from None
    if per_device is not None:
        return (values + [None] * device_count)[:device_count]
    return [default] * device_count

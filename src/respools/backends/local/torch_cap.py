"""Hold PyTorch to a fractional lease's memory share.

CUDA has no per-process memory limit, and PyTorch reads no environment variable for one, so a process on a
GPU fraction calls :func:`apply_torch_memory_cap` once, before its first allocation. It caps PyTorch's
caching allocator (``torch.cuda.set_per_process_memory_fraction``) on each visible device to the share the
lease's realization put in ``RESPOOLS_GPU_MEMORY_FRACTIONS`` / ``RESPOOLS_GPU_MEMORY_FRACTION``; going
past it raises ``torch.OutOfMemoryError`` in that process instead of starving its neighbours. The CUDA
context itself (a few hundred MiB) is outside the cap, which is why the watchdog has a tolerance.

torch is optional: without it, or without CUDA, this does nothing.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping

from respools.backends.local.caps import read_memory_fractions

log = logging.getLogger(__name__)


def apply_torch_memory_cap(environ: Mapping[str, str] | None = None) -> dict[int, float]:
    """Cap every visible CUDA device; answers ``{device index: fraction}`` for the devices capped."""
    env = os.environ if environ is None else environ
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        log.debug("torch is not installed; no PyTorch memory cap applied")
        return {}
    if not torch.cuda.is_available():
        return {}
    fractions = read_memory_fractions(env, int(torch.cuda.device_count()))
    applied: dict[int, float] = {}
    for device, fraction in enumerate(fractions):
        if fraction < 1:
            torch.cuda.set_per_process_memory_fraction(fraction, device)
            applied[device] = fraction
    if applied:
        log.info("PyTorch memory capped: %s", ", ".join(f"cuda:{d} {f:g}" for d, f in applied.items()))
    return applied

"""MIG profile names ('3g.40gb', '1g.10gb+me', '1c.3g.40gb') for the MIG devices NVML lists.

A MIG device handle does not say which profile it was created from; it only tells its slice counts and
memory. The authoritative name is in the parent GPU's profile table, so we match the device's shape
against that table. Where the driver cannot give the table (old drivers, restricted containers) we derive
the name the way NVIDIA labels profiles: memory in eighths of the card's nominal size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIB_PER_GIB = 1024
MEMORY_EIGHTHS = 8


@dataclass(frozen=True)
class MigShape:
    """What NVML reports about one MIG device (``nvmlDeviceGetAttributes`` on its handle)."""

    gpu_instance_slices: int
    compute_instance_slices: int
    memory_mb: int
    decoders: int = 0
    jpegs: int = 0
    ofas: int = 0


@dataclass(frozen=True)
class ProfileInfo:
    """One row of a GPU's GPU-instance profile table (``nvmlDeviceGetGpuInstanceProfileInfo``)."""

    name: str
    slices: int
    memory_mb: int
    decoders: int = 0
    jpegs: int = 0
    ofas: int = 0


def clean_profile_name(raw: str) -> str:
    """NVML names profiles 'MIG 3g.40gb'; the pool keys use the bare '3g.40gb'."""
    name = raw.strip()
    return name[4:].strip() if name.upper().startswith("MIG ") else name


def derived_name(gpu_instance_slices: int, memory_mb: int, parent_memory_mb: int) -> str:
    """Name a GPU instance without the profile table.

    NVIDIA labels memory as eighths of the card's nominal size, rounded half up: on an 80 GB A100 a 39.25 GiB
    instance is '40gb', on a 141 GB H200 a half is '71gb'. The nominal size is the total rounded up to a
    whole GiB (81559 MiB on an H100 is an 80 GB card)."""
    nominal_gb = math.ceil(parent_memory_mb / MIB_PER_GIB)
    eighths = max(1, round(memory_mb / parent_memory_mb * MEMORY_EIGHTHS)) if parent_memory_mb else 0
    gb = math.floor(eighths * nominal_gb / MEMORY_EIGHTHS + 0.5)
    return f"{gpu_instance_slices}g.{gb}gb"


def _match(shape: MigShape, table: Sequence[ProfileInfo]) -> ProfileInfo | None:
    same_slices = [p for p in table if p.slices == shape.gpu_instance_slices]
    if not same_slices:
        return None
    closest = min(abs(p.memory_mb - shape.memory_mb) for p in same_slices)
    candidates = [p for p in same_slices if abs(p.memory_mb - shape.memory_mb) == closest]
    if len(candidates) > 1:
        # '1g.10gb' and '1g.10gb+me' differ only in media engines.
        engines = [p for p in candidates if (p.decoders, p.jpegs, p.ofas) == (shape.decoders, shape.jpegs, shape.ofas)]
        candidates = engines or candidates
    return min(candidates, key=lambda p: (len(p.name), p.name))


def profile_name(shape: MigShape, table: Sequence[ProfileInfo], parent_memory_mb: int) -> str:
    """The profile name of a MIG device, with a 'Nc.' prefix when its compute instance is smaller than its
    GPU instance (as ``nvidia-smi -L`` and the Kubernetes device plugin name it)."""
    match = _match(shape, table)
    name = (
        clean_profile_name(match.name)
        if match is not None
        else derived_name(shape.gpu_instance_slices, shape.memory_mb, parent_memory_mb)
    )
    if 0 < shape.compute_instance_slices < shape.gpu_instance_slices:
        name = f"{shape.compute_instance_slices}c.{name}"
    return name

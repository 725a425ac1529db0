"""The machine types a Vertex training job can attach each accelerator to, and how many.

Vertex takes whole GPUs only, and the count must be one a machine type offers: A2, A3, A4 and G2 machines
come with a fixed number of GPUs (``a2-highgpu-4g`` has four A100s), so the machine type follows from the
count; the older accelerators attach to any N1 machine whose vCPUs stay within a limit per GPU count.
Tables after Google Cloud's GPU machine-type documentation; a count outside them is refused with the
counts that exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from respools.backends.protocol import BackendError


@dataclass(frozen=True)
class MachineShape:
    machine_type: str
    accelerator_count: int


def _fixed(prefix: str, counts: tuple[int, ...]) -> tuple[MachineShape, ...]:
    return tuple(MachineShape(f"{prefix}-{n}g", n) for n in counts)


_L4_SHAPES = tuple(
    MachineShape(f"g2-standard-{vcpus}", gpus)
    for vcpus, gpus in ((4, 1), (8, 1), (12, 1), (16, 1), (32, 1), (24, 2), (48, 4), (96, 8))
)

FIXED_SHAPES: dict[str, tuple[MachineShape, ...]] = {
    "NVIDIA_TESLA_A100": (*_fixed("a2-highgpu", (1, 2, 4, 8)), MachineShape("a2-megagpu-16g", 16)),
    "NVIDIA_A100_80GB": _fixed("a2-ultragpu", (1, 2, 4, 8)),
    "NVIDIA_H100_80GB": _fixed("a3-highgpu", (1, 2, 4, 8)),
    "NVIDIA_H100_MEGA_80GB": _fixed("a3-megagpu", (8,)),
    "NVIDIA_H200_141GB": _fixed("a3-ultragpu", (8,)),
    "NVIDIA_B200": _fixed("a4-highgpu", (8,)),
    "NVIDIA_GB200": _fixed("a4x-highgpu", (4,)),
    "NVIDIA_L4": _L4_SHAPES,
}
"""Accelerators that come built into their machine type; the first shape of a count is the default."""

N1_VCPU_LIMITS: dict[str, dict[int, int]] = {
    "NVIDIA_TESLA_T4": {1: 48, 2: 48, 4: 96},
    "NVIDIA_TESLA_V100": {1: 12, 2: 24, 4: 48, 8: 96},
    "NVIDIA_TESLA_P100": {1: 16, 2: 32, 4: 64},
    "NVIDIA_TESLA_P4": {1: 24, 2: 48, 4: 96},
}
"""Accelerators attached to N1 machines: GPU count → most vCPUs the machine may have."""

_N1_DEFAULT_VCPUS = {1: 8, 2: 16, 4: 32, 8: 64}
_N1_TYPE_RE = re.compile(r"^n1-(standard|highmem|highcpu)-(\d+)$")


def supported_accelerators() -> list[str]:
    return sorted([*FIXED_SHAPES, *N1_VCPU_LIMITS])


def valid_counts(accelerator: str) -> list[int]:
    if accelerator in FIXED_SHAPES:
        return sorted({shape.accelerator_count for shape in FIXED_SHAPES[accelerator]})
    if accelerator in N1_VCPU_LIMITS:
        return sorted(N1_VCPU_LIMITS[accelerator])
    raise BackendError(
        f"respools has no machine types for accelerator {accelerator}; "
        f"Vertex GPU training is supported for {', '.join(supported_accelerators())}"
    )


def machine_for(accelerator: str, count: int, machine_type: str | None = None) -> MachineShape:
    """The machine for ``count`` GPUs: ``machine_type`` if it fits the accelerator and count, else the default."""
    counts = valid_counts(accelerator)
    if count not in counts:
        raise BackendError(
            f"{count} x {accelerator} matches no Vertex machine type; "
            f"valid counts are {', '.join(str(n) for n in counts)}"
        )
    if accelerator in FIXED_SHAPES:
        shapes = [shape for shape in FIXED_SHAPES[accelerator] if shape.accelerator_count == count]
        if machine_type is None:
            return shapes[0]
        for shape in shapes:
            if shape.machine_type == machine_type:
                return shape
        raise BackendError(
            f"machine type {machine_type!r} does not carry {count} x {accelerator}; "
            f"use {', '.join(shape.machine_type for shape in shapes)}"
        )
    limit = N1_VCPU_LIMITS[accelerator][count]
    if machine_type is None:
        return MachineShape(f"n1-standard-{min(_N1_DEFAULT_VCPUS[count], limit)}", count)
    match = _N1_TYPE_RE.match(machine_type)
    if match is None or int(match.group(2)) > limit:
        raise BackendError(
            f"machine type {machine_type!r} cannot carry {count} x {accelerator}; "
            f"use an N1 machine type (n1-standard/highmem/highcpu) with at most {limit} vCPUs"
        )
    return MachineShape(machine_type, count)

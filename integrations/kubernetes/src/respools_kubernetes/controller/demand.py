"""What a workload's pods ask for, read from its pod template, as a respools resource vector.

Whole GPUs come from ``nvidia.com/gpu``, MIG slices from ``nvidia.com/mig-<profile>`` (limits, else
requests, summed over the containers; an init container runs alone, so the largest counts), fractions
from the ``respools.io/gpu-fraction`` annotation. A template that asks for none of these is not a GPU
workload and is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from respools_kubernetes.controller import names
from respools_kubernetes.fragment import GPU_RESOURCE, MIG_RESOURCE_PREFIX


class BadDemand(ValueError):
    """The workload asks for something no lease can give; the message says what to change."""


def template_resources(template: Mapping[str, Any]) -> dict[str, float]:
    """``{"gpu": 2}``, ``{"mig.3g.40gb": 1}``, ``{"gpu": 0.25, "gpu_memory_mb": 20000}``, or ``{}``."""
    spec = template.get("spec") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    totals: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for key, amount in _device_amounts(container).items():
            totals[key] = totals.get(key, Decimal(0)) + amount
    for container in spec.get("initContainers") or []:
        for key, amount in _device_amounts(container).items():
            totals[key] = max(totals.get(key, Decimal(0)), amount)
    fraction = annotations.get(names.GPU_FRACTION)
    if fraction is not None:
        if totals.get("gpu"):
            raise BadDemand(
                f"the pods ask for {totals['gpu']} nvidia.com/gpu and a {names.GPU_FRACTION} of {fraction}; "
                "ask for one or the other"
            )
        share = _number(fraction, names.GPU_FRACTION)
        if not Decimal(0) < share < Decimal(1):
            raise BadDemand(f"{names.GPU_FRACTION} must be between 0 and 1 (exclusive), not {fraction!r}")
        totals["gpu"] = share
        memory = annotations.get(names.GPU_MEMORY_MB)
        if memory is not None:
            totals["gpu_memory_mb"] = _number(memory, names.GPU_MEMORY_MB)
    return {key: float(value) if value % 1 else int(value) for key, value in totals.items() if value}


def _device_amounts(container: Mapping[str, Any]) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    wanted = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    amounts: dict[str, Decimal] = {}
    for name, value in wanted.items():
        if name == GPU_RESOURCE:
            amounts["gpu"] = _whole(value, name)
        elif name.startswith(MIG_RESOURCE_PREFIX):
            amounts["mig." + name.removeprefix(MIG_RESOURCE_PREFIX)] = _whole(value, name)
    return amounts


def _whole(value: Any, name: str) -> Decimal:
    amount = _number(value, name)
    if amount % 1 or amount < 0:
        raise BadDemand(f"{name} must be a whole number of devices, not {value!r} (use {names.GPU_FRACTION})")
    return amount


def _number(value: Any, name: str) -> Decimal:
    try:
        return Decimal(str(value))
    except InvalidOperation:
        raise BadDemand(f"{name}: {value!r} is not a number") from None

"""A step's demand in respools terms, and how ZenML's own ``ResourceSettings`` map onto it.

ZenML (0.97–0.98) describes a step's needs with ``ResourceSettings``: ``gpu_count``, ``cpu_count``,
``memory``, ``gpu_class``, pool ``resources`` (``PoolResourceDemand`` entries, or a name / name→quantity
shorthand) and ``reclaim_tolerance`` (legacy ``preemptible``). respools asks for one resource vector per
step (DESIGN §1), so the mapping is:

==========================================  =========================================================
ZenML                                       respools request
==========================================  =========================================================
``gpu_count=N``                             ``gpu: N``
``cpu_count=C``                             ``mcpu: C × 1000`` (rounded up)
``memory="16GiB"``                          ``memory_mb`` in decimal megabytes, rounded up (``17180``), as ZenML
                                            Pro converts it, so a request means the same number in both
``gpu_class``, a demand's ``class``         ``gpu_class``
``resources={"tensorrt_sessions": 2}``      ``tensorrt_sessions: 2`` (any respools key, ``mig.<profile>``)
demand ``kind="gpu"|"cpu"|"memory"``        ``gpu`` / ``mcpu`` / ``memory_mb`` with the demand's unit
``resource_selector`` / ``class_selector``  ``selectors`` (scalar values only)
``reclaim_tolerance``                       ``none`` → not preemptible; ``coordinated`` → preemptible, notice and
                                            the pool's grace; ``any`` → preemptible, stopped at the notice
``allocation_wait_timeout_seconds``         how long the orchestrator waits for the grant (then cancels)
``initialization_lease_seconds``            how long a granted lease may wait for the step's first heartbeat
==========================================  =========================================================

A key named twice (``gpu_count=1`` *and* ``resources={"gpu": 1}``) is refused rather than summed or
overridden: ZenML treats them as separate demands, and guessing which one the user meant would hand out the
wrong number of GPUs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from zenml.config.resource_settings import (
    DEFAULT_ALLOCATION_WAIT_TIMEOUT_SECONDS,
    DEFAULT_INITIALIZATION_LEASE_SECONDS,
    ByteUnit,
    PoolResourceDemand,
    ResourceSettings,
)
from zenml.enums import ResourceRequestReclaimTolerance

from respools.model import GPU, MCPU, MEMORY_MB, MILLI, mig_key, parse_resources

_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9][a-z0-9_.-]*)?$")
_CPU_UNITS = {None: MILLI, "cpu": MILLI, "cpus": MILLI, "core": MILLI, "cores": MILLI, "mcpu": 1, "m": 1}
_BYTE_UNITS = {unit.value.lower(): unit for unit in ByteUnit}
_MB = ByteUnit.MB.byte_value

ZENML_DEFAULT_PREEMPTIBLE = True
"""ZenML's default reclaim tolerance for an *isolated* step is ``any`` (it may be reclaimed). Every step a
pooled orchestrator runs is isolated (its own process or pod), so a step that says nothing is preemptible,
as on ZenML Pro."""


class DemandError(ValueError):
    """A step's resource settings cannot be expressed as a respools request; the message says why."""


class StepDemand(BaseModel):
    """What one ZenML step asks respools for; the run's labels and the idempotency key are added where the
    step's run is known (:class:`respools_zenml.leasing.LeaseArgs`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resources: dict[str, float] = Field(description="wire form: GPUs as decimals, other keys in integer units")
    preemptible: bool = False
    stop_at_notice: bool = Field(
        default=False, description="reclaim_tolerance='any': the orchestrator stops the step at the notice"
    )
    allocation_wait_timeout_s: float | None = Field(
        default=None, gt=0, description="give up (and cancel the request) when no grant came in this time"
    )
    initialization_lease_s: float | None = Field(
        default=None, gt=0, description="stop the step when its lease saw no heartbeat this long after the grant"
    )
    priority: int = 0
    max_retries: int = Field(default=0, ge=0)
    pools: list[str] | None = None
    gpu_class: str | None = None
    selectors: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict, description="user labels; the run's are added later")


class MappedSettings(BaseModel):
    """The part of a demand that ZenML's ``ResourceSettings`` determine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resources: dict[str, float] = Field(default_factory=dict)
    gpu_class: str | None = None
    selectors: dict[str, str] = Field(default_factory=dict)
    preemptible: bool | None = Field(default=None, description="None where reclaim_tolerance was not set")
    stop_at_notice: bool = Field(default=False, description="reclaim_tolerance='any' was said explicitly")
    allocation_wait_timeout_s: float = DEFAULT_ALLOCATION_WAIT_TIMEOUT_SECONDS
    initialization_lease_s: float = DEFAULT_INITIALIZATION_LEASE_SECONDS


def map_resource_settings(settings: ResourceSettings) -> MappedSettings:
    """Translate ZenML's ``ResourceSettings`` (see the module docstring for the table)."""
    vector = _Vector()
    gpu_class = _ClassChoice()
    selectors: dict[str, str] = {}
    if settings.gpu_count:
        vector.add(GPU, settings.gpu_count, "gpu_count")
        gpu_class.offer(settings.gpu_class, "gpu_class")
    elif settings.gpu_class:
        gpu_class.offer(settings.gpu_class, "gpu_class")
    if settings.cpu_count is not None:
        vector.add(MCPU, math.ceil(round(settings.cpu_count * MILLI, 6)), "cpu_count")
    memory = settings.get_memory(ByteUnit.MB)
    if memory is not None:
        vector.add(MEMORY_MB, math.ceil(round(memory, 6)), "memory")
    for demand in settings.normalized_resources:
        key, amount = _pool_demand(demand)
        vector.add(key, amount, f"resources[{demand.name or demand.kind}]")
        if demand.class_name is not None:
            gpu_class.offer(demand.class_name, f"resources[{demand.name or demand.kind}].class")
        for origin, selector in (
            ("resource_selector", demand.resource_selector),
            ("class_selector", demand.class_selector),
        ):
            _merge_selectors(selectors, selector or {}, origin)
    preemptible: bool | None = None
    if settings.reclaim_tolerance_explicitly_set:
        preemptible = settings.reclaim_tolerance != ResourceRequestReclaimTolerance.NONE
    return MappedSettings(
        resources=vector.wire(),
        gpu_class=gpu_class.value,
        selectors=selectors,
        preemptible=preemptible,
        stop_at_notice=settings.reclaim_tolerance_explicitly_set
        and settings.reclaim_tolerance == ResourceRequestReclaimTolerance.ANY,
        allocation_wait_timeout_s=settings.allocation_wait_timeout_seconds,
        initialization_lease_s=settings.initialization_lease_seconds,
    )


def normalize_resources(raw: Mapping[str, Any], origin: str = "resources") -> dict[str, float]:
    """A user's respools vector (``{"gpu": 0.5, "mig.3g.40gb": 1}``), checked by the same rules as the
    server's, in wire form."""
    try:
        parsed = parse_resources(dict(raw))
    except ValueError as exc:
        raise DemandError(f"{origin}: {exc}") from None
    return _wire(parsed)


def combine(
    base: Mapping[str, float], overlay: Mapping[str, float], overlay_origin: str, base_origin: str
) -> dict[str, float]:
    """Merge two vectors; a key in both is refused (see the module docstring)."""
    clash = sorted(set(base) & set(overlay))
    if clash:
        raise DemandError(
            f"{', '.join(clash)} is given both in {base_origin} and in {overlay_origin}; "
            "say it once so the step gets the amount you mean"
        )
    return {**base, **overlay}


def _pool_demand(demand: PoolResourceDemand) -> tuple[str, int | float]:
    kind = (demand.kind or "").lower() or None
    unit = (demand.unit or "").lower() or None
    name = demand.name
    if kind == "gpu" and (name is None or name.lower() == GPU):
        return GPU, demand.quantity
    if kind == "cpu" and (name is None or name.lower() in {"cpu", MCPU}):
        if unit not in _CPU_UNITS:
            raise DemandError(f"resources: unknown CPU unit {demand.unit!r}; use CPU or mCPU")
        return MCPU, demand.quantity * _CPU_UNITS[unit]
    if kind == "memory" and (name is None or name.lower() in {"memory", MEMORY_MB}):
        byte_unit = _BYTE_UNITS.get(unit or "mb")
        if byte_unit is None:
            raise DemandError(f"resources: unknown memory unit {demand.unit!r}; use one of {', '.join(_BYTE_UNITS)}")
        return MEMORY_MB, math.ceil(demand.quantity * byte_unit.byte_value / _MB)
    if kind == "mig" and name is not None and not name.startswith("mig."):
        return mig_key(name), demand.quantity
    key = name or kind
    if key is None or not _KEY_RE.match(key):
        raise DemandError(
            f"resources: {key!r} is not a respools resource key; use lowercase names such as 'gpu', "
            "'mig.3g.40gb' or a custom key like 'tensorrt_sessions'"
        )
    if unit is not None:
        raise DemandError(f"resources: {key!r} is counted in its own unit; drop unit={demand.unit!r}")
    return key, demand.quantity


def _merge_selectors(into: dict[str, str], selector: Mapping[str, Any], origin: str) -> None:
    for key, value in selector.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str | int | float):
            text = str(value)
        else:
            raise DemandError(
                f"resources: {origin}[{key!r}] = {value!r}; respools matches host labels and GPU attributes "
                "by equality, so give a string or number"
            )
        if into.get(key, text) != text:
            raise DemandError(f"resources: selector {key!r} is given twice, as {into[key]!r} and {text!r}")
        into[key] = text


class _Vector:
    """Accumulates a vector and remembers where each key came from, for the clash message."""

    def __init__(self) -> None:
        self._amounts: dict[str, int | float] = {}
        self._origins: dict[str, str] = {}

    def add(self, key: str, amount: int | float, origin: str) -> None:
        if key in self._amounts:
            raise DemandError(
                f"{key} is given both by {self._origins[key]} and by {origin}; "
                "say it once so the step gets the amount you mean"
            )
        self._amounts[key] = amount
        self._origins[key] = origin

    def wire(self) -> dict[str, float]:
        return normalize_resources(self._amounts, "resource settings")


class _ClassChoice:
    """One GPU class per request; two different ones cannot both be satisfied."""

    def __init__(self) -> None:
        self.value: str | None = None
        self._origin = ""

    def offer(self, value: str | None, origin: str) -> None:
        if value is None:
            return
        if self.value is not None and self.value != value:
            raise DemandError(f"GPU class {self.value!r} ({self._origin}) and {value!r} ({origin}) differ; give one")
        self.value, self._origin = value, origin


def _wire(vector: Mapping[str, int]) -> dict[str, float]:
    return {key: (amount / MILLI if key == GPU else amount) for key, amount in sorted(vector.items())}

"""DESIGN §2.1: whether a request could ever be granted on a pool. A request that fits nowhere is
rejected at once with the reason, rather than queued forever."""

from __future__ import annotations

from collections.abc import Mapping

from respools.model import (
    GPU,
    MILLI,
    UNBOUNDED_WHEN_UNMETERED,
    Form,
    format_resources,
    is_mig_key,
)
from respools.scheduling.catalogue import matches_class
from respools.scheduling.placement import GPU_MEMORY_KEY
from respools.scheduling.requests import RequestView
from respools.scheduling.state import PoolState, SubjectQuota


def ineligibility(pool: PoolState, quota: SubjectQuota, rv: RequestView) -> str | None:
    """Why ``rv`` can never be granted on ``pool`` under ``quota``, or None if it may be."""
    cache = pool.facts.never_eligible
    key = (rv.shape, tuple(rv.demand.items()))
    reason = cache.get(key, _UNKNOWN)
    if reason is _UNKNOWN:
        reason = cache[key] = _pool_reason(pool, rv)
    return reason or _quota_reason(pool, quota, rv)


_UNKNOWN = "not judged yet"
"""``never_eligible``'s answer for a shape it has not seen (None there means eligible)."""


def _pool_reason(pool: PoolState, rv: RequestView) -> str | None:
    """What rules the request out whoever asks: class, selectors, forms, keys, amounts, devices.
    Cached per pool and request shape, since a queue holds a handful of shapes."""
    spec = pool.spec
    request = rv.request
    name = spec.name
    if spec.inventory is None:
        if request.gpu_class and not (
            spec.gpu_class
            and (
                spec.gpu_class.lower() == request.gpu_class.lower() or matches_class(request.gpu_class, spec.gpu_class)
            )
        ):
            return f"pool {name!r} offers GPU class {spec.gpu_class or 'unspecified'}, not {request.gpu_class}"
        for key, value in request.selectors.items():
            if spec.labels.get(key) != value:
                return f"pool {name!r} does not match selector {key}={value}"
    reason = _forms_reason(pool, request.resources)
    if reason:
        return f"pool {name!r}: {reason}"
    for key, amount in rv.demand.items():
        capacity = pool.capacity.get(key)
        if capacity is None or capacity <= 0:
            if capacity is None and (
                key in UNBOUNDED_WHEN_UNMETERED or (key == GPU_MEMORY_KEY and spec.inventory is not None)
            ):
                continue
            offered = ", ".join(sorted(k for k, v in pool.capacity.items() if v > 0)) or "nothing"
            return f"pool {name!r} does not offer {key!r} (it offers {offered})"
        if amount > capacity:
            asked, offered = format_resources({key: amount}), format_resources({key: capacity})
            return f"asks for {asked} but pool {name!r} has {offered} in all"
    if spec.inventory is not None:
        return _inventory_reason(pool, rv)
    return None


def _quota_reason(pool: PoolState, quota: SubjectQuota, rv: RequestView) -> str | None:
    """What rules the request out for this subject: its limit, and its reserved share for a
    non-preemptible request."""
    name = pool.name
    for key, amount in rv.demand.items():
        if key not in pool.capacity:
            continue
        if quota.limit is not None and key in quota.limit and amount > quota.limit[key]:
            return (
                f"asks for {format_resources({key: amount})} but {quota.subject!r} is limited to "
                f"{format_resources({key: quota.limit[key]})} in pool {name!r}"
            )
        if not rv.preemptible:
            ceiling = quota.policy_reserved.get(key, 0) + _reservable(pool, quota.subject, key)
            if amount > ceiling:
                asked, reserved = format_resources({key: amount}), format_resources({key: ceiling})
                return (
                    f"non-preemptible requests must fit the reserved share, and {quota.subject!r} has "
                    f"{reserved} reserved in pool {name!r} for {asked}: "
                    "ask for less or mark the step preemptible"
                )
    return None


def _reservable(pool: PoolState, subject: str, key: str) -> int:
    """The most a subject's reservations that have not ended can add to its reserved share."""
    windows = pool.windows.get(subject)
    return max((w.resources.get(key, 0) for w in windows), default=0) if windows else 0


def _forms_reason(pool: PoolState, resources: Mapping[str, int]) -> str | None:
    forms = pool.forms
    supported = ", ".join(sorted(forms))
    gpu = resources.get(GPU, 0)
    if gpu > MILLI and gpu % MILLI:
        return "a step gets whole GPUs or a fraction of one GPU, not both: ask for a whole number or less than 1"
    if 0 < gpu < MILLI and Form.FRACTION not in forms:
        return f"its stack cannot express GPU fractions (it supports {supported})"
    if gpu >= MILLI and Form.WHOLE not in forms:
        return f"its stack cannot express whole GPUs (it supports {supported})"
    if any(is_mig_key(k) for k in resources) and Form.MIG not in forms:
        return f"its stack cannot express MIG slices (it supports {supported})"
    return None


def _inventory_reason(pool: PoolState, rv: RequestView) -> str | None:
    reason = pool.placement_impossible(rv.shape)
    return f"pool {pool.name!r}: {reason}" if reason else None

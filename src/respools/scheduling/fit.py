"""Whether a waiter fits a pool now (DESIGN §2.2–2.3, §2.10), and why not when it does not."""

from __future__ import annotations

from collections.abc import Mapping

from respools.model import STEP_RUN, Placement, WaitReason, format_resources
from respools.scheduling.requests import RequestView
from respools.scheduling.state import LeaseView, PoolState, SubjectQuota
from respools.scheduling.vectors import Vector

Shortfall = tuple[WaitReason, str]


def quota_shortfall(
    pool: PoolState,
    quota: SubjectQuota,
    rv: RequestView,
    released: Mapping[str, int] | None = None,
    own_released: Mapping[str, int] | None = None,
) -> Shortfall | None:
    """Accounting check on every metered key. ``released`` is capacity that planned preemptions would
    return (``own_released`` the waiter's own part of it)."""
    for key, amount in rv.demand.items():
        capacity = pool.capacity.get(key)
        if capacity is None:
            continue
        used = quota.usage.get(key, 0) - (own_released.get(key, 0) if own_released else 0)
        if not rv.preemptible and used + amount > quota.reserved.get(key, 0):
            return (
                WaitReason.RESERVED_SHARE,
                f"non-preemptible: {quota.subject!r} has {_amount(key, quota.reserved.get(key, 0) - used)} "
                f"of its reserved share free in pool {pool.name!r}, needs {_amount(key, amount)}",
            )
        limit = quota.limit.get(key) if quota.limit else None  # absent: the pool total, which free covers
        if limit is not None and used + amount > limit:
            reason = WaitReason.STEP_RUN_SLOTS if key == STEP_RUN else WaitReason.LIMIT
            return (
                reason,
                f"{quota.subject!r} uses {_amount(key, used)} of its limit {_amount(key, limit)} "
                f"in pool {pool.name!r}, needs {_amount(key, amount)} more",
            )
        free = pool.free.get(key, 0) + (released.get(key, 0) if released else 0)
        if free < amount:
            if free + pool.held.get(key, 0) >= amount:
                return (
                    WaitReason.HELD_FOR_PREEMPTOR,
                    f"capacity in pool {pool.name!r} is held for a request that preempted for it",
                )
            reason = WaitReason.STEP_RUN_SLOTS if key == STEP_RUN else WaitReason.NO_CAPACITY
            return (
                reason,
                f"pool {pool.name!r} has {_amount(key, free)} free, needs {_amount(key, amount)}",
            )
    return None


def reservation_shortfall(pool: PoolState, quota: SubjectQuota, rv: RequestView, now_ts: float) -> Shortfall | None:
    """DESIGN §2.10: a non-preemptible lease that leans on a reservation must not outlive it.

    Non-preemptible leases always sit within their subject's reserved share, and reserved shares plus
    reservations never exceed capacity (checked at definition), so the only way to take capacity that a
    reservation will need is to keep a share granted by a window after that window ends."""
    if rv.preemptible:
        return None
    windows = pool.windows.get(quota.subject)
    if not windows:
        return None
    runtime = rv.request.max_runtime_s
    until = now_ts + runtime if runtime is not None else float("inf")
    for window in windows:
        if not (now_ts < window.end < until):
            continue
        at = window.end
        reserved_then: Vector = dict(quota.policy_reserved)
        for other in windows:
            if other.start <= at < other.end:
                for key, amount in other.resources.items():
                    reserved_then[key] = reserved_then.get(key, 0) + amount
        for key, amount in rv.demand.items():
            if key not in pool.capacity:
                continue
            still_running = sum(
                lv.resources.get(key, 0) for lv in quota.leases if not lv.preemptible and _runs_until(lv, at)
            )
            if still_running + amount > reserved_then.get(key, 0):
                return (
                    WaitReason.RESERVATION_WINDOW,
                    f"its runtime would outlast the reservation that gives {quota.subject!r} this share "
                    f"in pool {pool.name!r}: declare a max_runtime_s that ends before the window does",
                )
    return None


def _runs_until(lv: LeaseView, at: float) -> bool:
    runtime = lv.lease.max_runtime_s
    return runtime is None or lv.granted_ts + runtime > at


def place(pool: PoolState, rv: RequestView) -> Placement | None:
    if pool.devices is None:
        return Placement()
    return pool.devices.place(rv.shape)


def _amount(key: str, value: int) -> str:
    return format_resources({key: value}) if value else f"{key} 0"

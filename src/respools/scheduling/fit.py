"""Whether a waiter fits a pool now (DESIGN §2.2–2.3, §2.10), and why not when it does not."""

from __future__ import annotations

from collections.abc import Mapping

from respools.model import GPU, MILLI, STEP_RUN, Placement, WaitReason
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
    worded: bool = True,
) -> Shortfall | None:
    """Accounting check on every metered key, with the reason it fails in words (an empty message when
    not ``worded``, for a caller that only needs to know). ``released`` is capacity that planned
    preemptions would return (``own_released`` the waiter's own part of it)."""
    miss = quota_miss(pool, quota, rv, released, own_released)
    if miss is None:
        return None
    return _explain(pool, quota, miss) if worded else (miss[0], "")


Miss = tuple[WaitReason, str, int, int]
"""Why the books say no: reason, key, what there is, what is asked (before any wording)."""


def quota_miss(
    pool: PoolState,
    quota: SubjectQuota,
    rv: RequestView,
    released: Mapping[str, int] | None = None,
    own_released: Mapping[str, int] | None = None,
) -> Miss | None:
    """The check itself, cheap enough for preemption planning to call once per candidate victim."""
    incoming = quota.incoming
    for key, amount in rv.demand.items():
        capacity = pool.capacity.get(key)
        if capacity is None:
            continue
        # What this cycle holds for the subject's nominated waiters is its own as much as what it uses:
        # a later request of the same subject must not count that reserved share or limit as unused.
        used = quota.usage.get(key, 0) + incoming.get(key, 0) - (own_released.get(key, 0) if own_released else 0)
        if not rv.preemptible and used + amount > quota.reserved.get(key, 0):
            return (WaitReason.RESERVED_SHARE, key, max(0, quota.reserved.get(key, 0) - used), amount)
        limit = quota.limit.get(key) if quota.limit else None  # absent: the pool total, which free covers
        if limit is not None and used + amount > limit:
            reason = WaitReason.STEP_RUN_SLOTS if key == STEP_RUN else WaitReason.LIMIT
            return (reason, key, max(0, limit - used), amount)
        free = pool.free.get(key, 0) + (released.get(key, 0) if released else 0)
        if free < amount:
            if free + pool.held.get(key, 0) >= amount:
                return (WaitReason.HELD_FOR_PREEMPTOR, key, free, amount)
            return (WaitReason.STEP_RUN_SLOTS if key == STEP_RUN else WaitReason.NO_CAPACITY, key, free, amount)
    return None


def _explain(pool: PoolState, quota: SubjectQuota, miss: Miss) -> Shortfall:
    reason, key, have, need = miss
    where = f"in pool {pool.name!r}"
    if reason is WaitReason.RESERVED_SHARE:
        text = f"non-preemptible: {quota.subject!r} has {_amount(key, have)} of its reserved share free {where}"
    elif reason is WaitReason.LIMIT or (reason is WaitReason.STEP_RUN_SLOTS and quota.limit and key in quota.limit):
        text = f"{quota.subject!r} has {_amount(key, have)} left under its limit {where}"
    elif reason is WaitReason.HELD_FOR_PREEMPTOR:
        text = f"capacity {where} is held for a request that preempted for it"
    else:
        text = f"pool {pool.name!r} has {_amount(key, have)} free"
    return (reason, f"{text}, needs {_amount(key, need)}")


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
    runtime = lv.max_runtime_s
    return runtime is None or lv.granted_ts + runtime > at


def place(pool: PoolState, rv: RequestView) -> Placement | None:
    if pool.devices is None:
        return Placement()
    return pool.devices.place(rv.shape)


def _amount(key: str, value: int) -> str:
    """``format_resources({key: value})`` for one key (a wait reason is worded for every failing queue
    head of every cycle), and ``key 0`` where that would say ``nothing``."""
    return f"{key} {value / MILLI if key == GPU else value:g}" if value else f"{key} 0"

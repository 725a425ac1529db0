"""Refusing bad definitions up front, each with the field at fault, so that the scheduler never has to
cope with a pool, policy or reservation that cannot be honoured."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from respools.model import (
    GPU,
    MILLI,
    Form,
    PolicySpec,
    PoolSpec,
    ReservationSpec,
    format_resources,
    is_mig_key,
    mig_key,
    mig_profile,
)
from respools.scheduling.catalogue import ALL_MIG_PROFILES, gpu_class, mig_profiles_of
from respools.scheduling.vectors import Vector, add_into


class DefinitionError(ValueError):
    """A definition that cannot be honoured. ``field`` is the dotted path of the value at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def pool_capacity(pool: PoolSpec) -> Vector:
    """Effective capacity: the declared keys, plus ``gpu`` and ``mig.*`` derived from an inventory."""
    capacity: Vector = dict(pool.capacity)
    if pool.inventory is None:
        return capacity
    for host in pool.inventory:
        for gpu in host.gpus:
            if gpu.mig_enabled:
                for instance in gpu.mig_instances:
                    key = mig_key(instance.profile)
                    capacity[key] = capacity.get(key, 0) + 1
            else:
                capacity[GPU] = capacity.get(GPU, 0) + MILLI
    return capacity


def check_pool(pool: PoolSpec) -> None:
    forms = set(pool.forms) if pool.forms is not None else set(Form)
    for key, amount in pool.capacity.items():
        if is_mig_key(key):
            profile = mig_profile(key)
            known = mig_profiles_of(pool.gpu_class) if pool.gpu_class else ALL_MIG_PROFILES
            if known is not None and profile not in known:
                raise DefinitionError(
                    f"capacity.{key}",
                    f"unknown MIG profile {profile!r}"
                    + (f" for {pool.gpu_class}" if pool.gpu_class else "")
                    + f"; known: {', '.join(sorted(known))}",
                )
            if Form.MIG not in forms:
                raise DefinitionError(f"capacity.{key}", "the pool's forms do not include 'mig'")
        if key == GPU and amount % MILLI and Form.FRACTION not in forms:
            raise DefinitionError(
                "capacity.gpu", "a fractional GPU capacity needs the 'fraction' form, which this pool lacks"
            )
    for h, host in enumerate(pool.inventory or []):
        for g, gpu in enumerate(host.gpus):
            where = f"inventory[{h}].gpus[{g}]"
            if not gpu.mig_enabled:
                continue
            if Form.MIG not in forms:
                raise DefinitionError(f"{where}.mig_enabled", "the pool's forms do not include 'mig'")
            known = mig_profiles_of(gpu.model, gpu.memory_mb)
            for i, instance in enumerate(gpu.mig_instances):
                if known is not None and instance.profile not in known:
                    raise DefinitionError(
                        f"{where}.mig_instances[{i}].profile",
                        f"{gpu_class(gpu.model, gpu.memory_mb)} has no MIG profile {instance.profile!r}; "
                        f"it offers {', '.join(sorted(known))}",
                    )
                if known is None and instance.profile not in ALL_MIG_PROFILES:
                    raise DefinitionError(
                        f"{where}.mig_instances[{i}].profile", f"unknown MIG profile {instance.profile!r}"
                    )


def _check_keys_metered(field: str, vector: Vector, capacity: Vector, pool: str) -> None:
    for key in vector:
        if key not in capacity:
            offered = ", ".join(sorted(capacity)) or "nothing"
            raise DefinitionError(f"{field}.{key}", f"pool {pool!r} does not meter {key!r} (it meters {offered})")


def _peak_reservations(reservations: Iterable[ReservationSpec], within: tuple[float, float] | None = None) -> Vector:
    """The largest amount reserved at any one moment, per key (sweep over window boundaries)."""
    points: list[tuple[float, int, ReservationSpec]] = []
    for r in reservations:
        start, end = r.start.timestamp(), r.end.timestamp()
        if within is not None and (end <= within[0] or start >= within[1]):
            continue
        points.append((start, 1, r))
        points.append((end, -1, r))
    points.sort(key=lambda p: (p[0], p[1]))  # ends before starts at the same instant: [start, end)
    current: Vector = {}
    peak: Vector = {}
    for _, sign, r in points:
        add_into(current, r.resources, sign)
        for key, amount in current.items():
            if amount > peak.get(key, 0):
                peak[key] = amount
    return peak


def _check_reserved_total(
    field: str, policies: Iterable[PolicySpec], reservations: Iterable[ReservationSpec], pool: PoolSpec
) -> None:
    capacity = pool_capacity(pool)
    reserved: Vector = {}
    for policy in policies:
        add_into(reserved, policy.reserved)
    add_into(reserved, _peak_reservations(reservations))
    for key, amount in sorted(reserved.items()):
        if amount > capacity.get(key, 0):
            raise DefinitionError(
                f"{field}.{key}",
                f"reserved shares in pool {pool.name!r} would add up to {format_resources({key: amount})}, "
                f"more than its capacity {format_resources({key: capacity.get(key, 0)})}: "
                "lower a reservation or add capacity",
            )


def check_policy(
    policy: PolicySpec,
    pool: PoolSpec,
    policies: Sequence[PolicySpec],
    reservations: Sequence[ReservationSpec] = (),
) -> None:
    """``policies`` are the pool's other policies; one of the same subject is replaced by ``policy``."""
    if policy.pool != pool.name:
        raise DefinitionError("pool", f"policy names pool {policy.pool!r}, checked against {pool.name!r}")
    capacity = pool_capacity(pool)
    _check_keys_metered("reserved", policy.reserved, capacity, pool.name)
    if policy.limit is not None:
        _check_keys_metered("limit", policy.limit, capacity, pool.name)
        for key, amount in policy.reserved.items():
            if key in policy.limit and amount > policy.limit[key]:
                raise DefinitionError(
                    f"reserved.{key}",
                    f"reserved {format_resources({key: amount})} exceeds the limit "
                    f"{format_resources({key: policy.limit[key]})}",
                )
    others = [p for p in policies if p.subject != policy.subject and p.pool == pool.name]
    _check_reserved_total("reserved", [*others, policy], reservations, pool)


def check_reservation(
    reservation: ReservationSpec,
    pool: PoolSpec,
    policies: Sequence[PolicySpec],
    reservations: Sequence[ReservationSpec],
) -> None:
    """``reservations`` are the pool's existing ones (without this one)."""
    capacity = pool_capacity(pool)
    _check_keys_metered("resources", reservation.resources, capacity, pool.name)
    window = (reservation.start.timestamp(), reservation.end.timestamp())
    overlapping = [r for r in reservations if r.pool == pool.name]
    peak = _peak_reservations([*overlapping, reservation], within=window)
    reserved: Vector = {}
    for policy in policies:
        if policy.pool == pool.name:
            add_into(reserved, policy.reserved)
    add_into(reserved, peak)
    for key, amount in sorted(reserved.items()):
        if key in reservation.resources and amount > capacity.get(key, 0):
            raise DefinitionError(
                f"resources.{key}",
                f"during this window reserved shares and reservations in pool {pool.name!r} would add up "
                f"to {format_resources({key: amount})}, more than its capacity "
                f"{format_resources({key: capacity.get(key, 0)})}",
            )

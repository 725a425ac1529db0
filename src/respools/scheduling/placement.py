"""Placement on an inventory: which host, GPUs, MIG instances or GPU fractions a lease gets.

Whole GPUs are bin-packed (the fullest host that still fits, all GPUs of one replica on one host),
fractions go to the fullest GPU that still has room (sum of fractions ≤ 1 per GPU), MIG instances to the
GPU with the fewest free instances of that profile. Packing keeps whole hosts free for the large
requests that need them. A gang places each replica on a different host, all or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from respools.model import GPU, MILLI, Host, Placement, PlacementItem, PoolSpec, is_mig_key, mig_profile
from respools.scheduling.catalogue import matches_class

GPU_MEMORY_KEY = "gpu_memory_mb"


@dataclass(frozen=True, slots=True)
class Shape:
    """One replica's device needs, derived once per request."""

    whole: int = 0
    fraction: int = 0
    mig: tuple[tuple[str, int], ...] = ()
    memory_mb: int = 0
    gpu_class: str | None = None
    selectors: tuple[tuple[str, str], ...] = ()
    replicas: int = 1

    @property
    def needs_devices(self) -> bool:
        return bool(self.whole or self.fraction or self.mig)


def shape_of(resources: Mapping[str, int], replicas: int, gpu_class: str | None, selectors: Mapping[str, str]) -> Shape:
    gpu = resources.get(GPU, 0)
    return Shape(
        whole=gpu // MILLI if gpu >= MILLI else 0,
        fraction=gpu if 0 < gpu < MILLI else 0,
        mig=tuple(sorted((mig_profile(k), v) for k, v in resources.items() if is_mig_key(k))),
        memory_mb=resources.get(GPU_MEMORY_KEY, 0),
        gpu_class=gpu_class,
        selectors=tuple(sorted(selectors.items())),
        replicas=replicas,
    )


@dataclass(slots=True)
class GpuSlot:
    host: str
    uuid: str
    index: int
    model: str
    memory_mb: int
    attributes: dict[str, str]
    mig_enabled: bool
    mig_profile_of: dict[str, str]
    used_milli: int = 0
    used_memory: int = 0
    mig_used: set[str] = field(default_factory=set)

    def free_mig(self, profile: str) -> list[str]:
        return sorted(u for u, p in self.mig_profile_of.items() if p == profile and u not in self.mig_used)


@dataclass(slots=True)
class HostSlots:
    """A host's GPUs plus running totals that let placement skip hosts that cannot fit without
    looking at their GPUs (upper bounds: class and selectors may exclude some of the devices)."""

    name: str
    labels: dict[str, str]
    gpus: list[GpuSlot]
    free_whole: int = 0
    free_milli: int = 0
    free_mig: dict[str, int] = field(default_factory=dict)

    def may_fit(self, shape: Shape) -> bool:
        if shape.whole > self.free_whole or shape.fraction > self.free_milli:
            return False
        return all(self.free_mig.get(profile, 0) >= count for profile, count in shape.mig)


class DeviceMap:
    """Occupancy of one pool's inventory; mutated as the cycle grants and plans preemptions."""

    def __init__(self, pool: PoolSpec) -> None:
        self.hosts: list[HostSlots] = []
        self._by_uuid: dict[str, GpuSlot] = {}
        self._host_of: dict[str, HostSlots] = {}
        for host in sorted(pool.inventory or [], key=lambda h: h.name):
            self.hosts.append(self._host_slots(host))
        self._matches_cache: dict[tuple[str, str | None, tuple[tuple[str, str], ...]], bool] = {}

    def _host_slots(self, host: Host) -> HostSlots:
        slots = []
        for gpu in sorted(host.gpus, key=lambda g: g.index):
            slot = GpuSlot(
                host=host.name,
                uuid=gpu.uuid,
                index=gpu.index,
                model=gpu.model,
                memory_mb=gpu.memory_mb,
                attributes=gpu.attributes,
                mig_enabled=gpu.mig_enabled,
                mig_profile_of={m.uuid: m.profile for m in gpu.mig_instances},
            )
            slots.append(slot)
            self._by_uuid[gpu.uuid] = slot
        hs = HostSlots(host.name, host.labels, slots)
        for slot in slots:
            if slot.mig_enabled:
                for profile in slot.mig_profile_of.values():
                    hs.free_mig[profile] = hs.free_mig.get(profile, 0) + 1
            else:
                hs.free_whole += 1
                hs.free_milli += MILLI
        self._host_of[host.name] = hs
        return hs

    # -- occupancy ----------------------------------------------------------------------------------

    def occupy(self, placement: Placement, sign: int = 1) -> None:
        """Apply (``sign=1``) or undo (``sign=-1``) a lease's placement. Devices that left the
        inventory are ignored: their lease records stay valid, the capacity is simply gone."""
        for item in placement.items:
            slot = self._by_uuid.get(item.gpu_uuid)
            if slot is None:
                continue
            host = self._host_of[slot.host]
            if item.mig_uuid is not None:
                profile = slot.mig_profile_of.get(item.mig_uuid)
                if profile is None:
                    continue
                if sign > 0 and item.mig_uuid not in slot.mig_used:
                    slot.mig_used.add(item.mig_uuid)
                    host.free_mig[profile] -= 1
                elif sign < 0 and item.mig_uuid in slot.mig_used:
                    slot.mig_used.discard(item.mig_uuid)
                    host.free_mig[profile] += 1
                continue
            was_free = slot.used_milli == 0
            before = max(0, MILLI - slot.used_milli)
            slot.used_milli += sign * item.milli
            slot.used_memory += sign * self._memory_of(item, slot)
            host.free_whole += (slot.used_milli == 0) - was_free
            host.free_milli += max(0, MILLI - slot.used_milli) - before

    @staticmethod
    def _memory_of(item: PlacementItem, slot: GpuSlot) -> int:
        if item.memory_mb is not None:
            return item.memory_mb
        return slot.memory_mb * item.milli // MILLI

    def release_all(self, placements: Iterable[Placement]) -> None:
        for placement in placements:
            self.occupy(placement, -1)

    # -- matching -----------------------------------------------------------------------------------

    def _matches(self, host: HostSlots, slot: GpuSlot, shape: Shape) -> bool:
        if shape.gpu_class is None and not shape.selectors:
            return True
        key = (slot.uuid, shape.gpu_class, shape.selectors)
        cached = self._matches_cache.get(key)
        if cached is None:
            cached = (shape.gpu_class is None or matches_class(shape.gpu_class, slot.model, slot.memory_mb)) and all(
                host.labels.get(k) == v or slot.attributes.get(k) == v for k, v in shape.selectors
            )
            self._matches_cache[key] = cached
        return cached

    # -- placing ------------------------------------------------------------------------------------

    def place(self, shape: Shape) -> Placement | None:
        """A placement for every replica on distinct hosts, or None. Does not occupy it."""
        if not shape.needs_devices:
            return Placement()
        items: list[PlacementItem] = []
        used_hosts: set[str] = set()
        for _ in range(shape.replicas):
            best: tuple[int, str, list[PlacementItem]] | None = None
            for host in self.hosts:
                if host.name in used_hosts or not host.may_fit(shape):
                    continue
                found = self._place_on_host(host, shape)
                if found is None:
                    continue
                score = self._slack(host, shape)
                if best is None or (score, host.name) < (best[0], best[1]):
                    best = (score, host.name, found)
                    if score == 0:
                        break
            if best is None:
                return None
            used_hosts.add(best[1])
            items.extend(best[2])
        return Placement(items=items)

    def _slack(self, host: HostSlots, shape: Shape) -> int:
        """How much would be left on the host after the grant: smaller is a tighter (better) fit."""
        free_whole = sum(
            1 for g in host.gpus if not g.mig_enabled and g.used_milli == 0 and self._matches(host, g, shape)
        )
        free_milli = sum(MILLI - g.used_milli for g in host.gpus if not g.mig_enabled and self._matches(host, g, shape))
        free_mig = sum(len(g.free_mig(profile)) for g in host.gpus if g.mig_enabled for profile, _ in shape.mig)
        return (free_whole - shape.whole) * MILLI + free_milli - shape.fraction + free_mig

    def _place_on_host(self, host: HostSlots, shape: Shape) -> list[PlacementItem] | None:
        items: list[PlacementItem] = []
        taken: set[str] = set()
        if shape.whole:
            free = [
                g
                for g in host.gpus
                if not g.mig_enabled
                and g.used_milli == 0
                and g.memory_mb >= shape.memory_mb
                and self._matches(host, g, shape)
            ]
            if len(free) < shape.whole:
                return None
            for g in free[: shape.whole]:
                items.append(PlacementItem(host=host.name, gpu_uuid=g.uuid, gpu_index=g.index))
                taken.add(g.uuid)
        if shape.fraction:
            best: GpuSlot | None = None
            for g in host.gpus:
                if g.mig_enabled or g.uuid in taken or not self._matches(host, g, shape):
                    continue
                if g.used_milli + shape.fraction > MILLI:
                    continue
                memory = shape.memory_mb or g.memory_mb * shape.fraction // MILLI
                if g.used_memory + memory > g.memory_mb:
                    continue
                if best is None or g.used_milli > best.used_milli:
                    best = g
            if best is None:
                return None
            items.append(
                PlacementItem(
                    host=host.name,
                    gpu_uuid=best.uuid,
                    gpu_index=best.index,
                    milli=shape.fraction,
                    memory_mb=shape.memory_mb or best.memory_mb * shape.fraction // MILLI,
                )
            )
        for profile, count in shape.mig:
            candidates = sorted(
                (
                    (len(free), g.index, g, free)
                    for g in host.gpus
                    if g.mig_enabled and self._matches(host, g, shape)
                    for free in [g.free_mig(profile)]
                    if free
                ),
                key=lambda c: (c[0], c[1]),
            )
            need = count
            for _, _, g, free_uuids in candidates:
                for mig_uuid in free_uuids[:need]:
                    items.append(
                        PlacementItem(
                            host=host.name,
                            gpu_uuid=g.uuid,
                            gpu_index=g.index,
                            mig_uuid=mig_uuid,
                            mig_profile=profile,
                            milli=0,
                        )
                    )
                need -= min(need, len(free_uuids))
                if need == 0:
                    break
            if need:
                return None
        return items


def possible_on_empty(empty: DeviceMap, shape: Shape) -> str | None:
    """Why ``shape`` could never be placed on this inventory (``empty`` is its map with nothing
    occupied), or None if it could on an empty pool."""
    if not shape.needs_devices:
        return None
    if empty.place(shape) is not None:
        return None
    what = []
    if shape.whole:
        what.append(f"{shape.whole} whole GPU(s) on one host")
    if shape.fraction:
        what.append(f"a {shape.fraction / MILLI:g} fraction of a GPU")
    for profile, count in shape.mig:
        what.append(f"{count} MIG instance(s) {profile} on one host")
    constraint = []
    if shape.gpu_class:
        constraint.append(f"of class {shape.gpu_class}")
    if shape.selectors:
        constraint.append("matching " + ", ".join(f"{k}={v}" for k, v in shape.selectors))
    if shape.memory_mb:
        constraint.append(f"with {shape.memory_mb} MB of GPU memory")
    hosts = f" × {shape.replicas} distinct hosts" if shape.replicas > 1 else ""
    return (
        f"its inventory has no room for {' and '.join(what)}{hosts}"
        + (f" {' '.join(constraint)}" if constraint else "")
        + " even when empty"
    )

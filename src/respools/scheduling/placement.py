"""Placement on an inventory: which host, GPUs, MIG instances or GPU fractions a lease gets.

Whole GPUs are bin-packed (the fullest host that still fits, all GPUs of one replica on one host),
fractions go to the fullest GPU that still has room (sum of fractions ≤ 1 per GPU), MIG instances to the
GPU with the fewest free instances of that profile. Packing keeps whole hosts free for the large
requests that need them. A gang places each replica on a different host, all or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import NamedTuple

from respools.model import GPU, MILLI, Host, Placement, PlacementItem, PoolSpec, is_mig_key, mig_profile
from respools.scheduling.catalogue import matches_class

GPU_MEMORY_KEY = "gpu_memory_mb"


class Shape(NamedTuple):
    """One replica's device needs, derived once per request group. A named tuple, not a dataclass:
    shapes key the cycle's caches, and a tuple hashes and compares in C."""

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

    @property
    def any_device(self) -> bool:
        """No class or selector to match: every device of the inventory will do."""
        return self.gpu_class is None and not self.selectors


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
    plain_gpus: int = 0
    """GPUs not split into MIG instances, busy or not."""
    mig_instances: dict[str, int] = field(default_factory=dict)
    """MIG instances per profile, busy or not."""

    def may_fit(self, shape: Shape) -> bool:
        if shape.whole > self.free_whole or shape.fraction > self.free_milli:
            return False
        # (no generator for a shape without MIG: placement checks ask this of every host)
        return not shape.mig or all(self.free_mig.get(profile, 0) >= count for profile, count in shape.mig)


_ITEM_FIELDS = itemgetter("gpu_uuid", "mig_uuid", "milli", "memory_mb")
_GPU_FIELDS = itemgetter("uuid", "index", "model", "memory_mb", "attributes", "mig_enabled", "mig_instances")
_GPU_INDEX = attrgetter("index")

Held = tuple[tuple[GpuSlot, HostSlots, int, int, str | None], ...]
"""A placement resolved against a map: per device its slot, host, milli, memory and MIG instance."""


class Freed(NamedTuple):
    """What releasing a list of leases frees on a map, summed per GPU: preemption planning releases
    the same lists (a subject's candidates) for many waiters while they stay the same."""

    gpus: list[tuple[GpuSlot, int, int]]
    """Per GPU (not split into MIG instances), the milli and memory freed."""
    instances: list[tuple[GpuSlot, str]]
    """The MIG instances freed, with their GPU."""
    hosts: dict[str, HostSlots]
    """The hosts anything is freed on."""


def freed(held: Iterable[Held]) -> Freed:
    """``Freed`` by the leases whose devices are ``held``."""
    per_gpu: dict[str, tuple[GpuSlot, int, int]] = {}
    instances: list[tuple[GpuSlot, str]] = []
    hosts: dict[str, HostSlots] = {}
    for devices in held:
        for slot, host, milli, memory, mig_uuid in devices:
            hosts[host.name] = host
            if mig_uuid is not None:
                instances.append((slot, mig_uuid))
                continue
            found = per_gpu.get(slot.uuid)
            per_gpu[slot.uuid] = (slot, milli, memory) if found is None else (slot, found[1] + milli, found[2] + memory)
    return Freed(list(per_gpu.values()), instances, hosts)


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
        name = host.name
        for gpu in sorted(host.gpus, key=_GPU_INDEX):
            # Read through ``__dict__``: every cycle maps every GPU of every pool again.
            uuid, index, model, memory_mb, attributes, mig_enabled, migs = _GPU_FIELDS(gpu.__dict__)
            profiles = {m.uuid: m.profile for m in migs} if migs else {}
            slot = GpuSlot(name, uuid, index, model, memory_mb, attributes, mig_enabled, profiles)
            slots.append(slot)
            self._by_uuid[uuid] = slot
        hs = HostSlots(host.name, host.labels, slots)
        for slot in slots:
            if slot.mig_enabled:
                for profile in slot.mig_profile_of.values():
                    hs.free_mig[profile] = hs.free_mig.get(profile, 0) + 1
            else:
                hs.free_whole += 1
                hs.free_milli += MILLI
        hs.plain_gpus = hs.free_whole
        hs.mig_instances = dict(hs.free_mig)
        self._host_of[host.name] = hs
        return hs

    # -- occupancy ----------------------------------------------------------------------------------

    def reset(self) -> None:
        """Nothing occupied: the map as new, for a cycle that reuses the map of the cycle before
        rather than mapping the whole inventory again."""
        for host in self.hosts:
            for slot in host.gpus:
                slot.used_milli = slot.used_memory = 0
                if slot.mig_used:
                    slot.mig_used.clear()
            host.free_whole = host.plain_gpus
            host.free_milli = host.plain_gpus * MILLI
            host.free_mig = dict(host.mig_instances)

    def occupy(self, placement: Placement, sign: int = 1) -> None:
        """Apply (``sign=1``) or undo (``sign=-1``) a lease's placement."""
        self.apply(self.resolve(placement), sign)

    def resolve(self, placement: Placement) -> Held:
        """The placement's devices on this map. Devices that left the inventory are dropped: their
        lease records stay valid, the capacity is simply gone."""
        held: list[tuple[GpuSlot, HostSlots, int, int, str | None]] = []
        for item in placement.items:
            gpu_uuid, mig_uuid, milli, memory_mb = _ITEM_FIELDS(item.__dict__)  # once per lease per cycle
            slot = self._by_uuid.get(gpu_uuid)
            if slot is None:
                continue
            host = self._host_of[slot.host]
            if mig_uuid is None:
                memory = memory_mb if memory_mb is not None else slot.memory_mb * milli // MILLI
                held.append((slot, host, milli, memory, None))
            elif mig_uuid in slot.mig_profile_of:
                held.append((slot, host, 0, 0, mig_uuid))
        return tuple(held)

    def apply(self, held: Held, sign: int = 1) -> None:
        """``occupy`` for a placement resolved once: preemption planning takes the same leases off
        the map and puts them back many times per cycle."""
        for slot, host, milli, memory, mig_uuid in held:
            if mig_uuid is not None:
                profile = slot.mig_profile_of[mig_uuid]
                if sign > 0 and mig_uuid not in slot.mig_used:
                    slot.mig_used.add(mig_uuid)
                    host.free_mig[profile] -= 1
                elif sign < 0 and mig_uuid in slot.mig_used:
                    slot.mig_used.discard(mig_uuid)
                    host.free_mig[profile] += 1
                continue
            used = slot.used_milli
            after = used + sign * milli
            slot.used_milli = after
            slot.used_memory += sign * memory
            host.free_whole += (after == 0) - (used == 0)
            # What is left of the GPU before and after, never below nothing (a hold may over-commit it);
            # conditionals, not max(): this runs for every device of every lease a cycle takes or gives.
            host.free_milli += (MILLI - after if after < MILLI else 0) - (MILLI - used if used < MILLI else 0)

    def release_all(self, held: Iterable[Held]) -> None:
        for devices in held:
            self.apply(devices, -1)

    def fits_released(self, shape: Shape, released: Sequence[Freed]) -> bool:
        """Whether ``shape``, which does not fit now, would fit once what ``released`` frees were free:
        preemption planning asks this of whole selections of candidates, tens of leases each.

        Placing on a host reads its GPUs' own counters, never the host's running totals (those only
        let ``fits`` skip hosts, and a host that ``_place_on_host`` fits on always passes them). So
        only the freed GPUs' counters are taken back and put back, once per GPU (``Freed`` sums a
        list of leases' devices), rather than releasing and applying every lease on the whole map.
        One replica can only fit on a host that something is freed on; a gang counts every host."""
        hosts: dict[str, HostSlots] = {}
        instances: list[tuple[GpuSlot, str]] = []
        memory_counts = shape.fraction > 0  # only a fraction reads a GPU's memory in use
        for part in released:
            hosts.update(part.hosts)
            if memory_counts:
                for slot, milli, memory in part.gpus:
                    slot.used_milli -= milli
                    slot.used_memory -= memory
            else:
                for slot, milli, _ in part.gpus:
                    slot.used_milli -= milli
            for slot, mig_uuid in part.instances:
                if mig_uuid in slot.mig_used:
                    slot.mig_used.discard(mig_uuid)
                    instances.append((slot, mig_uuid))
        try:
            if shape.replicas == 1:
                return any(self._place_on_host(host, shape) is not None for host in hosts.values())
            found = sum(1 for host in self.hosts if self._place_on_host(host, shape) is not None)
            return found >= shape.replicas
        finally:
            for part in released:
                if memory_counts:
                    for slot, milli, memory in part.gpus:
                        slot.used_milli += milli
                        slot.used_memory += memory
                else:
                    for slot, milli, _ in part.gpus:
                        slot.used_milli += milli
            for slot, mig_uuid in instances:
                slot.mig_used.add(mig_uuid)

    # -- matching -----------------------------------------------------------------------------------

    def _matches(self, host: HostSlots, slot: GpuSlot, shape: Shape) -> bool:
        if shape.any_device:
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
        picks: list[_Pick] = []
        used_hosts: set[str] = set()
        for _ in range(shape.replicas):
            best: tuple[int, str, list[_Pick]] | None = None
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
            picks.extend(best[2])
        return Placement(items=[_item(pick) for pick in picks])

    def fits(self, shape: Shape, hosts: Iterable[HostSlots] | None = None) -> bool:
        """Whether ``place`` would find a placement (on ``hosts`` only, if given), without choosing
        the best hosts: preemption planning asks this many times per cycle and needs only yes or no."""
        if not shape.needs_devices:
            return True
        found = 0
        for host in self.hosts if hosts is None else hosts:
            if host.may_fit(shape) and self._place_on_host(host, shape) is not None:
                found += 1
                if found == shape.replicas:
                    return True
        return False

    def fits_when_empty(self, shape: Shape) -> bool | None:
        """Whether ``shape`` fits this inventory with nothing occupied, from the hosts' totals; None
        when the shape has constraints (class, selectors, memory) that the totals cannot judge."""
        if shape.gpu_class is not None or shape.selectors or shape.memory_mb:
            return None
        gpus = shape.whole + (1 if shape.fraction else 0)
        hosts = sum(
            1
            for host in self.hosts
            if host.plain_gpus >= gpus and all(host.mig_instances.get(p, 0) >= n for p, n in shape.mig)
        )
        return hosts >= shape.replicas

    def _slack(self, host: HostSlots, shape: Shape) -> int:
        """How much would be left on the host after the grant: smaller is a tighter (better) fit."""
        # A GPU held for a preemptor can be over-committed for a while; it counts as full, not as less.
        if shape.any_device:  # the host's counters
            free_whole, free_milli = host.free_whole, host.free_milli
            free_mig = sum(host.free_mig.get(profile, 0) for profile, _ in shape.mig)
        else:
            free_whole = sum(
                1 for g in host.gpus if not g.mig_enabled and g.used_milli == 0 and self._matches(host, g, shape)
            )
            free_milli = sum(
                max(0, MILLI - g.used_milli) for g in host.gpus if not g.mig_enabled and self._matches(host, g, shape)
            )
            free_mig = sum(len(g.free_mig(profile)) for g in host.gpus if g.mig_enabled for profile, _ in shape.mig)
        return (free_whole - shape.whole) * MILLI + free_milli - shape.fraction + free_mig

    def _place_on_host(self, host: HostSlots, shape: Shape) -> list[_Pick] | None:
        picks: list[_Pick] = []
        taken: set[str] = set()
        any_gpu = shape.any_device  # then skip asking each device
        if shape.whole:
            free = [
                g
                for g in host.gpus
                if not g.mig_enabled
                and g.used_milli == 0
                and g.memory_mb >= shape.memory_mb
                and (any_gpu or self._matches(host, g, shape))
            ]
            if len(free) < shape.whole:
                return None
            for g in free[: shape.whole]:
                picks.append((host.name, g.uuid, g.index, MILLI, None, None, None))
                taken.add(g.uuid)
        if shape.fraction:
            best: GpuSlot | None = None
            for g in host.gpus:
                if g.mig_enabled or g.uuid in taken or not (any_gpu or self._matches(host, g, shape)):
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
            memory_cap = shape.memory_mb or best.memory_mb * shape.fraction // MILLI
            picks.append((host.name, best.uuid, best.index, shape.fraction, memory_cap, None, None))
        for profile, count in shape.mig:
            candidates = sorted(
                (
                    (len(free), g.index, g, free)
                    for g in host.gpus
                    if g.mig_enabled and (any_gpu or self._matches(host, g, shape))
                    for free in [g.free_mig(profile)]
                    if free
                ),
                key=lambda c: (c[0], c[1]),
            )
            need = count
            for _, _, g, free_uuids in candidates:
                for mig_uuid in free_uuids[:need]:
                    picks.append((host.name, g.uuid, g.index, 0, None, mig_uuid, profile))
                need -= min(need, len(free_uuids))
                if need == 0:
                    break
            if need:
                return None
        return picks


_Pick = tuple[str, str, int, int, int | None, str | None, str | None]
"""host, GPU uuid, index, milli, memory cap, MIG uuid, MIG profile: a device chosen on a host being
tried. Kept as a tuple until its host wins, since building the model validates every field."""


def _item(pick: _Pick) -> PlacementItem:
    host, uuid, index, milli, memory_mb, mig_uuid, mig_profile = pick
    return PlacementItem(
        host=host,
        gpu_uuid=uuid,
        gpu_index=index,
        milli=milli,
        memory_mb=memory_mb,
        mig_uuid=mig_uuid,
        mig_profile=mig_profile,
    )


def possible_on_empty(empty: DeviceMap, shape: Shape) -> str | None:
    """Why ``shape`` could never be placed on this inventory (``empty`` is its map with nothing
    occupied), or None if it could on an empty pool."""
    if not shape.needs_devices or empty.fits(shape):
        return None
    return never_fits(shape)


def never_fits(shape: Shape) -> str:
    """Why ``shape`` has no room on an inventory even when it is empty, in words."""
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

"""The per-host, per-GPU map of a pool: which lease holds which GPU, MIG instance or fraction.

Built from the pool's inventory (declared hosts and those agents report, lost ones included and
marked) and the placement of every live lease. A placement that names a GPU the inventory no longer
lists (its host was forgotten) is kept as *stray*, so capacity never silently disappears from view."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from respools.model import MILLI, Lease, PlacementItem, PoolSpec, RequestState


@dataclass(frozen=True, slots=True)
class Holder:
    """A lease as the map shows it; ``subject`` is ``None`` when the viewer may not see whose it is."""

    lease_id: str | None
    subject: str | None
    state: RequestState
    label: str
    color: int


@dataclass(frozen=True, slots=True)
class Segment:
    """A share of a GPU that is not MIG-partitioned: ``milli`` of 1000 starting at ``start``."""

    start: int
    milli: int
    holder: Holder
    memory_mb: int | None


@dataclass(frozen=True, slots=True)
class MigSlot:
    uuid: str
    profile: str
    holder: Holder | None


@dataclass(frozen=True, slots=True)
class GpuTile:
    uuid: str
    index: int
    model: str
    memory_mb: int
    mig: bool
    segments: tuple[Segment, ...] = ()
    slots: tuple[MigSlot, ...] = ()

    @property
    def used_milli(self) -> int:
        return sum(s.milli for s in self.segments)

    @property
    def summary(self) -> str:
        """A line under the tile for what the bar alone does not say (empty for a GPU held whole)."""
        if self.mig:
            used = sum(1 for s in self.slots if s.holder is not None)
            return f"MIG · {used} of {len(self.slots)} instances held"
        if not self.segments:
            return "free"
        if len(self.segments) == 1 and self.segments[0].milli >= MILLI:
            return ""  # the holder line already says "whole GPU"
        return f"shared · {self.used_milli / MILLI:g} of 1 held"


@dataclass(frozen=True, slots=True)
class HostMap:
    name: str
    live: bool
    gpus: tuple[GpuTile, ...]


@dataclass(frozen=True, slots=True)
class GpuMap:
    hosts: tuple[HostMap, ...]
    stray: tuple[tuple[PlacementItem, Holder], ...] = ()
    legend: tuple[Holder, ...] = field(default_factory=tuple)


def build_gpu_map(
    pool: PoolSpec, live_hosts: set[str] | None, leases: Sequence[Lease], describe: Callable[[Lease], Holder]
) -> GpuMap | None:
    """The map of ``pool`` (with every host it ever had: see ``Definitions.known_pool``), or ``None``
    for a pool without an inventory. ``live_hosts`` names the hosts in the inventory now (``None``:
    all of them); the others are drawn as lost."""
    if pool.inventory is None:
        return None
    by_gpu: dict[str, list[tuple[PlacementItem, Holder]]] = {}
    by_mig: dict[str, Holder] = {}
    holders: dict[str, Holder] = {}
    for lease in leases:
        if lease.pool != pool.name:
            continue
        holder = describe(lease)
        for item in lease.placement.items:
            holders[holder.label if holder.subject is None else holder.subject] = holder
            if item.mig_uuid is not None:
                by_mig[item.mig_uuid] = holder
            by_gpu.setdefault(item.gpu_uuid, []).append((item, holder))
    placed: set[int] = set()
    hosts = []
    for host in pool.inventory:
        tiles = []
        for gpu in sorted(host.gpus, key=lambda g: g.index):
            items = by_gpu.get(gpu.uuid, [])
            placed.update(id(item) for item, _ in items)
            if gpu.mig_enabled:
                slots = tuple(MigSlot(m.uuid, m.profile, by_mig.get(m.uuid)) for m in gpu.mig_instances)
                tiles.append(GpuTile(gpu.uuid, gpu.index, gpu.model, gpu.memory_mb, True, slots=slots))
                continue
            segments = []
            offset = 0
            for item, holder in sorted(items, key=lambda pair: (pair[1].subject or "~", pair[1].lease_id or "")):
                share = min(item.milli, MILLI - offset)
                if share <= 0:
                    continue
                segments.append(Segment(offset, share, holder, item.memory_mb))
                offset += share
            tiles.append(GpuTile(gpu.uuid, gpu.index, gpu.model, gpu.memory_mb, False, segments=tuple(segments)))
        live = live_hosts is None or host.name in live_hosts
        hosts.append(HostMap(host.name, live, tuple(tiles)))
    stray = tuple((item, holder) for pairs in by_gpu.values() for item, holder in pairs if id(item) not in placed)
    legend = tuple(sorted(holders.values(), key=lambda h: (h.subject is None, h.subject or "")))
    return GpuMap(tuple(hosts), stray, legend)

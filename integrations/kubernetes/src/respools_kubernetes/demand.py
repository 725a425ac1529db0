"""What each pod of a lease must ask Kubernetes for, independent of how the cluster spells it.

A lease placed on an inventory says exactly which devices it holds; one placed on a pool without inventory
has only its resource vector. Both reduce to one :class:`PodDemand` per host (a pod runs on one node),
which :mod:`respools_kubernetes.fragment` then spells in the cluster's resource names. Shapes a pod cannot
ask for (two fractions, a fraction next to whole GPUs, 1.5 GPUs) are refused here with the reason.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from respools.backends.protocol import BackendError
from respools.model import (
    GPU,
    GPU_MEMORY_MB,
    MILLI,
    Form,
    Gpu,
    Lease,
    PlacementItem,
    PoolSpec,
    is_mig_key,
    mig_profile,
)


@dataclass(frozen=True)
class Fraction:
    """A share of one GPU. ``memory_mb`` is the memory cap where respools knows it."""

    milli: int
    gpu_uuid: str | None = None
    memory_mb: int | None = None
    gpu_memory_mb: int | None = None


@dataclass(frozen=True)
class PodDemand:
    """The devices one pod asks for, on ``host`` (None where the pool has no inventory)."""

    host: str | None
    whole: int = 0
    mig: tuple[tuple[str, int], ...] = ()
    fraction: Fraction | None = None
    models: tuple[str, ...] = ()
    """GPU models of the placed devices; selecting single-strategy MIG nodes needs them."""

    @property
    def forms(self) -> frozenset[Form]:
        forms = set()
        if self.whole:
            forms.add(Form.WHOLE)
        if self.mig:
            forms.add(Form.MIG)
        if self.fraction is not None:
            forms.add(Form.FRACTION)
        return frozenset(forms)


def pod_demands(lease: Lease, pool: PoolSpec) -> list[PodDemand]:
    """One demand per placed host (sorted by host), or one unpinned demand for a lease without placement."""
    if not lease.placement.items:
        return [_demand_from_resources(lease)]
    gpus = _inventory_gpus(pool)
    by_host: dict[str, list[PlacementItem]] = defaultdict(list)
    for item in lease.placement.items:
        by_host[item.host].append(item)
    return [_demand_from_items(lease, host, by_host[host], gpus) for host in sorted(by_host)]


def _inventory_gpus(pool: PoolSpec) -> dict[str, Gpu]:
    return {gpu.uuid: gpu for host in pool.inventory or [] for gpu in host.gpus}


def _demand_from_items(lease: Lease, host: str, items: list[PlacementItem], gpus: dict[str, Gpu]) -> PodDemand:
    mig = Counter(item.mig_profile for item in items if item.mig_profile is not None)
    whole = [item for item in items if item.mig_profile is None and item.milli >= MILLI]
    shares = [item for item in items if item.mig_profile is None and item.milli < MILLI]
    fraction: Fraction | None = None
    if shares:
        _refuse_mixed_fraction(lease, len(shares), len(whole) + sum(mig.values()))
        item = shares[0]
        gpu = gpus.get(item.gpu_uuid)
        fraction = Fraction(
            milli=item.milli,
            gpu_uuid=item.gpu_uuid,
            memory_mb=_memory_cap(item, gpu, lease),
            gpu_memory_mb=gpu.memory_mb if gpu is not None else None,
        )
    models = sorted({gpus[item.gpu_uuid].model for item in items if item.gpu_uuid in gpus})
    return PodDemand(
        host=host,
        whole=len(whole),
        mig=tuple(sorted(mig.items())),
        fraction=fraction,
        models=tuple(models),
    )


def _demand_from_resources(lease: Lease) -> PodDemand:
    gpu = lease.resources.get(GPU, 0)
    mig = tuple(sorted((mig_profile(key), n) for key, n in lease.resources.items() if is_mig_key(key)))
    if gpu % MILLI == 0:
        return PodDemand(host=None, whole=gpu // MILLI, mig=mig)
    if gpu > MILLI:
        raise BackendError(
            f"lease {lease.id}: gpu {gpu / MILLI:g} is neither whole GPUs nor one fraction of a GPU; "
            "a Kubernetes pod takes whole GPUs (nvidia.com/gpu) or a single fraction below 1"
        )
    _refuse_mixed_fraction(lease, 1, sum(n for _, n in mig))
    memory = lease.resources.get(GPU_MEMORY_MB)
    return PodDemand(host=None, mig=mig, fraction=Fraction(milli=gpu, memory_mb=memory))


def _refuse_mixed_fraction(lease: Lease, fractions: int, other_devices: int) -> None:
    if fractions > 1:
        raise BackendError(
            f"lease {lease.id}: {fractions} GPU fractions on one host cannot be asked for by one pod; "
            "Kubernetes GPU sharing (HAMi, Run:ai) gives a pod one fraction of one GPU"
        )
    if other_devices:
        raise BackendError(
            f"lease {lease.id}: a GPU fraction next to whole GPUs or MIG slices cannot be asked for by one pod; "
            "ask for whole GPUs, MIG slices, or a single fraction"
        )


def _memory_cap(item: PlacementItem, gpu: Gpu | None, lease: Lease) -> int | None:
    """The fraction's memory: its explicit cap, else its share of the GPU's memory (rounded down)."""
    if item.memory_mb is not None:
        return item.memory_mb
    if gpu is not None:
        return gpu.memory_mb * item.milli // MILLI
    return lease.resources.get(GPU_MEMORY_MB)


def forms_used(demands: Iterable[PodDemand]) -> frozenset[Form]:
    return frozenset().union(*(demand.forms for demand in demands))

"""A lease in local terms: the environment a process on the placed host starts with.

Devices are named by UUID, never by index: indices change with ``CUDA_DEVICE_ORDER`` and under MPS
remapping, UUIDs do not. MIG slices are named by their MIG UUID. Fractions get the GPU UUID plus the caps
from :mod:`caps`. Realizing is pure apart from the MPS probe the caller passes in.
"""

from __future__ import annotations

from typing import Any

from respools.backends.local.caps import cap_env, device_cap
from respools.backends.local.mps import MpsState
from respools.backends.protocol import BackendError, Realization
from respools.model import MILLI, Lease, PlacementItem, PoolSpec

VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
LEASE_ID_ENV = "RESPOOLS_LEASE_ID"


def realize_local(lease: Lease, pool: PoolSpec, host: str, mps: MpsState, backend: str) -> Realization:
    items = lease.placement.items
    mine = _merge([item for item in items if item.host == host])
    if items and not mine:
        raise BackendError(
            f"lease {lease.id} is placed on {', '.join(lease.placement.hosts)}, not on this host "
            f"{host!r}: realize it there (or set RESPOOLS_HOST_NAME if this host registered under "
            "another name)"
        )
    for item in mine:
        if item.mig_profile is not None and item.mig_uuid is None:
            raise BackendError(
                f"lease {lease.id}: MIG slice {item.mig_profile} on GPU {item.gpu_uuid} has no MIG UUID; "
                "the host's inventory must list its MIG instances"
            )
    memory = _memory_by_uuid(pool)
    caps = [device_cap(item, memory.get(item.gpu_uuid)) for item in mine]
    env = {
        LEASE_ID_ENV: lease.id,
        VISIBLE_DEVICES_ENV: ",".join(item.mig_uuid or item.gpu_uuid for item in mine),
    }
    env.update(cap_env(caps, mps))
    return Realization(
        backend=backend,
        env=env,
        native={
            "host": host,
            "mps": mps.running,
            "devices": [_device(item, cap.memory_mb) for item, cap in zip(mine, caps, strict=True)],
        },
        notes=_notes(lease, mine, [cap.capped for cap in caps], mps),
    )


def _merge(items: list[PlacementItem]) -> list[PlacementItem]:
    """One entry per device, in GPU index order: CUDA rejects a device listed twice."""
    merged: dict[str, PlacementItem] = {}
    for item in sorted(items, key=lambda i: i.gpu_index):  # stable: slices of one GPU keep placement order
        key = item.mig_uuid or item.gpu_uuid
        seen = merged.get(key)
        if seen is None:
            merged[key] = item
            continue
        memory = None if seen.memory_mb is None or item.memory_mb is None else seen.memory_mb + item.memory_mb
        merged[key] = seen.model_copy(update={"milli": min(MILLI, seen.milli + item.milli), "memory_mb": memory})
    return list(merged.values())


def _memory_by_uuid(pool: PoolSpec) -> dict[str, int]:
    return {gpu.uuid: gpu.memory_mb for host in pool.inventory or [] for gpu in host.gpus}


def _device(item: PlacementItem, memory_cap_mb: int | None) -> dict[str, Any]:
    return {
        "gpu_uuid": item.gpu_uuid,
        "gpu_index": item.gpu_index,
        "mig_uuid": item.mig_uuid,
        "mig_profile": item.mig_profile,
        "milli": item.milli,
        "memory_cap_mb": memory_cap_mb,
    }


def _notes(lease: Lease, mine: list[PlacementItem], capped: list[bool], mps: MpsState) -> list[str]:
    notes: list[str] = []
    if not mine:
        notes.append("the lease holds no GPUs: CUDA_VISIBLE_DEVICES is empty, so the process sees none")
    elif len(mine) < len(lease.placement.items):
        notes.append(
            f"{len(mine)} of {len(lease.placement.items)} devices are on this host; each placed host realizes its own"
        )
    if sum(item.mig_uuid is not None for item in mine) and len(mine) > 1:
        notes.append(
            "a CUDA process enumerates at most one MIG device: start one process per device, each with "
            "CUDA_VISIBLE_DEVICES set to one of these UUIDs"
        )
    if any(capped):
        notes.append(
            "memory caps are honoured by frameworks, not enforced by CUDA: in PyTorch call "
            "respools.backends.local.torch_cap.apply_torch_memory_cap(); the host agent's watchdog reports "
            "processes above their cap"
        )
        if not mps.running:
            notes.append("no MPS daemon runs on this host: the compute share is time-sliced, not limited")
        if not all(capped):
            notes.append(
                "framework-wide caps (XLA, RESPOOLS_GPU_MEMORY_FRACTION) use the strictest device's "
                "share; RESPOOLS_GPU_MEMORY_FRACTIONS lists each device's"
            )
    return notes

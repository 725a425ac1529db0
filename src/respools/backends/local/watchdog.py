"""The NVML watchdog: notices a lease whose processes use more GPU memory than its share.

Framework caps are promises a process may break (or never make), so the host agent checks what the
driver actually sees: per-process memory from ``nvmlDeviceGetComputeRunningProcesses``. A process belongs
to a lease when it, an ancestor, or its process group is the lease's registered holder (DataLoader workers
and torchrun ranks count for their lease). A lease is over its share on a GPU when its processes there use
more than the cap plus the pool's tolerance, and on any GPU outside its placement at all (cap 0).

Each over-use is reported once when it starts (and again if it stops and restarts); a report whose
callback fails is retried at the next scan. NVML reports host PIDs, so this only works in the host's PID
namespace: run the agent on the host, not in an unprivileged container.

MIG-enabled GPUs are skipped: a MIG slice's memory is isolated by the hardware, and NVML only shows
per-process memory on MIG devices to privileged callers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pydantic import BaseModel

from respools.backends.local import procfs
from respools.backends.local.caps import memory_cap_mb
from respools.backends.local.holders import Holder, HolderRegistry
from respools.backends.local.nvml import mig_enabled, nvml_session, text
from respools.backends.local.settings import local_settings
from respools.model import PoolSpec

log = logging.getLogger(__name__)

BYTES_PER_MIB = 1024 * 1024
MAX_ANCESTRY = 64


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mb: int


@dataclass(frozen=True)
class GpuUsage:
    """One GPU as NVML sees it now: its memory and its compute processes."""

    gpu_uuid: str
    memory_mb: int
    processes: tuple[GpuProcess, ...]


class OveruseEvent(BaseModel):
    """A lease using more of a GPU than it holds; the body of ``POST /v1/leases/{id}/overuse``."""

    lease_id: str
    pool: str
    host: str
    gpu_uuid: str
    pids: list[int]
    used_memory_mb: int
    cap_memory_mb: int
    tolerance_mb: int
    preempt: bool
    message: str


def read_gpu_usage() -> list[GpuUsage]:
    """Per-process memory on every GPU not in MIG mode. Raises ``DiscoveryError`` without a driver."""
    usage: list[GpuUsage] = []
    with nvml_session() as nvml:
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            if mig_enabled(nvml, handle):
                continue
            processes = tuple(
                GpuProcess(pid=int(p.pid), used_mb=int(p.usedGpuMemory) // BYTES_PER_MIB)
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                if p.usedGpuMemory is not None  # not available (e.g. Windows WDDM)
            )
            usage.append(
                GpuUsage(
                    gpu_uuid=text(nvml.nvmlDeviceGetUUID(handle)),
                    memory_mb=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // BYTES_PER_MIB,
                    processes=processes,
                )
            )
    return usage


class Watchdog:
    """Compares NVML's per-process memory with the caps of the leases registered on this host."""

    def __init__(
        self,
        host: str,
        on_overuse: Callable[[OveruseEvent], None],
        *,
        registry: HolderRegistry | None = None,
        read_usage: Callable[[], list[GpuUsage]] = read_gpu_usage,
        parent_of: Callable[[int], int | None] = procfs.parent_pid,
        group_of: Callable[[int], int | None] = procfs.process_group,
    ) -> None:
        self.host = host
        self.on_overuse = on_overuse
        self.registry = registry or HolderRegistry()
        self._read_usage = read_usage
        self._parent_of = parent_of
        self._group_of = group_of
        self._reported: set[tuple[str, str]] = set()

    def scan(self, pool: PoolSpec) -> list[OveruseEvent]:
        """One pass: report new over-use of ``pool``'s leases; answers every over-use seen now."""
        settings = local_settings(pool)
        holders = [h for h in self.registry.holders() if h.pool == pool.name and h.host == self.host]
        if not holders:
            self._reported.clear()
            return []
        events = [
            self._event(holder, gpu, pids, used, settings.overuse_tolerance_mb, settings.preempt_on_overuse)
            for holder, gpu, pids, used in self._usage_by_lease(holders)
            if used > self._cap(holder, gpu) + settings.overuse_tolerance_mb
        ]
        current = {(event.lease_id, event.gpu_uuid) for event in events}
        self._reported &= current
        for event in events:
            key = (event.lease_id, event.gpu_uuid)
            if key in self._reported:
                continue
            try:
                self.on_overuse(event)
            except Exception:
                log.exception("reporting over-use of lease %s failed; retrying next scan", event.lease_id)
                continue
            self._reported.add(key)
        return events

    def _usage_by_lease(self, holders: list[Holder]) -> Iterable[tuple[Holder, GpuUsage, list[int], int]]:
        by_pid = {holder.pid: holder for holder in holders}
        own_group = os.getpgrp()
        by_group = {h.pgid: h for h in holders if h.pgid is not None and h.pgid != own_group}
        for gpu in self._read_usage():
            per_lease: dict[str, tuple[Holder, list[int], int]] = {}
            for process in gpu.processes:
                holder = self._owner(process.pid, by_pid, by_group)
                if holder is None:
                    continue
                _, pids, used = per_lease.get(holder.lease_id, (holder, [], 0))
                per_lease[holder.lease_id] = (holder, [*pids, process.pid], used + process.used_mb)
            for holder, pids, used in per_lease.values():
                yield holder, gpu, sorted(pids), used

    def _owner(self, pid: int, by_pid: dict[int, Holder], by_group: dict[int, Holder]) -> Holder | None:
        current: int | None = pid
        for _ in range(MAX_ANCESTRY):
            if current is None or current <= 1:
                break
            if current in by_pid:
                return by_pid[current]
            current = self._parent_of(current)
        group = self._group_of(pid)
        return by_group.get(group) if group is not None else None

    @staticmethod
    def _cap(holder: Holder, gpu: GpuUsage) -> int:
        """Memory the lease may use on this GPU: 0 off its placement, all of it for a whole GPU."""
        items = [item for item in holder.items if item.gpu_uuid == gpu.gpu_uuid and item.mig_uuid is None]
        caps = [memory_cap_mb(item, gpu.memory_mb) for item in items]
        return min(gpu.memory_mb, sum(cap if cap is not None else gpu.memory_mb for cap in caps))

    def _event(
        self, holder: Holder, gpu: GpuUsage, pids: list[int], used: int, tolerance: int, preempt: bool
    ) -> OveruseEvent:
        cap = self._cap(holder, gpu)
        where = f"GPU {gpu.gpu_uuid}" if cap else f"GPU {gpu.gpu_uuid}, which is not in its placement"
        return OveruseEvent(
            lease_id=holder.lease_id,
            pool=holder.pool,
            host=self.host,
            gpu_uuid=gpu.gpu_uuid,
            pids=pids,
            used_memory_mb=used,
            cap_memory_mb=cap,
            tolerance_mb=tolerance,
            preempt=preempt,
            message=(
                f"lease {holder.lease_id} uses {used} MiB on {where} (cap {cap} MiB + {tolerance} MiB "
                f"tolerance; pids {', '.join(map(str, pids))})"
            ),
        )

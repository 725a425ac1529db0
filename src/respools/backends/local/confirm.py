"""Confirming that a lease's local workload is gone, so that the service may hand its GPUs over.

Signals are sent and may be ignored; a killed process may linger while the driver tears its CUDA context
down, still holding the memory. So the stop counts as confirmed only when both hold: the registered process
group (or PID) has no live member left, and NVML lists no compute process of it on the lease's GPUs. A
listed PID that no longer exists in ``/proc`` counts as the workload's: the driver still holds its memory.
Whatever cannot be checked (no driver, a GPU NVML no longer shows) is not confirmed, and the lease then
waits for its holder's release or a full TTL of silence instead (DESIGN §2.8).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection

from respools.backends.local import procfs
from respools.backends.local.holders import Holder
from respools.backends.local.nvml import DiscoveryError, nvml_session, text

ComputePids = Callable[[Collection[str]], dict[str, list[int]]]
"""PIDs NVML lists as compute processes on each GPU of a set (by UUID); GPUs it does not show are absent."""


def compute_pids(gpu_uuids: Collection[str]) -> dict[str, list[int]]:
    """Compute processes on the given GPUs (whole GPU or MIG parent), as NVML lists them now."""
    wanted = set(gpu_uuids)
    found: dict[str, list[int]] = {}
    with nvml_session() as nvml:
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = text(nvml.nvmlDeviceGetUUID(handle))
            if uuid in wanted:
                found[uuid] = [int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)]
    return found


def _group(holder: Holder) -> int | None:
    """The group that is the workload: never our own (a holder that did not start a group of its own is
    its PID alone, as the stopper treats it)."""
    return holder.pgid if holder.pgid is not None and holder.pgid != os.getpgrp() else None


def _is_workloads(pid: int, holder: Holder, group: int | None) -> bool:
    if pid == holder.pid or not procfs.running(pid):
        return True
    return group is not None and procfs.process_group(pid) == group


def confirm_gone(holder: Holder, pids_on: ComputePids = compute_pids) -> str | None:
    """One line of evidence that ``holder``'s workload is gone from this host and its GPUs, or ``None``."""
    group = _group(holder)
    if group is not None:
        if next(procfs.group_members(group), None) is not None:
            return None
        gone = f"process group {group} has no live process"
    else:
        if procfs.running(holder.pid):
            return None
        gone = f"process {holder.pid} is gone"
    uuids = sorted({item.gpu_uuid for item in holder.items})
    if not uuids:
        return f"{gone}; the lease holds no GPU on {holder.host}"
    try:
        listed = pids_on(uuids)
    except DiscoveryError:
        return None
    if set(listed) != set(uuids):
        return None  # a GPU NVML no longer shows cannot be vouched for
    for pids in listed.values():
        if any(_is_workloads(pid, holder, group) for pid in pids):
            return None
    return f"{gone}; NVML lists no compute process of it on {', '.join(uuids)}"

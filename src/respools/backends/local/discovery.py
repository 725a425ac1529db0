"""Inventory of this machine's GPUs through NVML: every GPU with its index, UUID, product name, memory and MIG
mode, and in MIG mode every MIG device with its profile and UUID.

This is what the agent registers in a pool, so it must never crash on an odd host: a host without a driver
yields a :class:`Discovery` with no host and a one-line reason, and a MIG slot NVML cannot read is skipped
with a warning rather than failing the whole host.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from respools.backends.local.nvml import DiscoveryError, explain, is_error, mig_enabled, nvml_session, text
from respools.backends.local.profiles import MigShape, ProfileInfo, profile_name
from respools.model import Gpu, Host, MigInstance

log = logging.getLogger(__name__)

BYTES_PER_MIB = 1024 * 1024
DRIVER_LABEL = "nvidia_driver_version"
COMPUTE_CAPABILITY_ATTRIBUTE = "compute_capability"


@dataclass(frozen=True)
class Discovery:
    """What discovery found: the host with its GPUs, or no host and the reason in one line."""

    host: Host | None
    reason: str | None = None


def discover_host(name: str) -> Discovery:
    """Discover this machine as host ``name``; never raises for a missing or broken driver."""
    try:
        with nvml_session() as nvml:
            try:
                gpus = [_gpu(nvml, index) for index in range(int(nvml.nvmlDeviceGetCount()))]
                labels = _host_labels(nvml)
            except nvml.NVMLError as exc:
                raise DiscoveryError(explain(exc)) from None
    except DiscoveryError as exc:
        return Discovery(host=None, reason=str(exc))
    return Discovery(host=Host(name=name, gpus=gpus, labels=labels))


def _host_labels(nvml: Any) -> dict[str, str]:
    try:
        return {DRIVER_LABEL: text(nvml.nvmlSystemGetDriverVersion())}
    except nvml.NVMLError:
        return {}


def _gpu(nvml: Any, index: int) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory_mb = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // BYTES_PER_MIB
    uuid = text(nvml.nvmlDeviceGetUUID(handle))
    is_mig = mig_enabled(nvml, handle)
    return Gpu(
        uuid=uuid,
        index=index,
        model=text(nvml.nvmlDeviceGetName(handle)),
        memory_mb=memory_mb,
        mig_enabled=is_mig,
        mig_instances=_mig_instances(nvml, handle, uuid, memory_mb) if is_mig else [],
        attributes=_attributes(nvml, handle),
    )


def _attributes(nvml: Any, handle: Any) -> dict[str, str]:
    """GPU attributes that selectors and GPU classes can match on."""
    try:
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    except nvml.NVMLError:
        return {}
    return {COMPUTE_CAPABILITY_ATTRIBUTE: f"{int(major)}.{int(minor)}"}


def _mig_instances(nvml: Any, handle: Any, gpu_uuid: str, memory_mb: int) -> list[MigInstance]:
    table = _profile_table(nvml, handle)
    instances: list[MigInstance] = []
    for slot in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError as exc:
            if not is_error(exc, "NVMLError_NotFound", "NVMLError_InvalidArgument"):
                log.warning("gpu %s: MIG slot %d unreadable (%s); skipped", gpu_uuid, slot, explain(exc))
            continue  # an empty slot: fewer MIG devices exist than the GPU could hold
        try:
            uuid = text(nvml.nvmlDeviceGetUUID(mig))
            shape = _shape(nvml.nvmlDeviceGetAttributes(mig))
        except nvml.NVMLError as exc:
            log.warning("gpu %s: MIG slot %d unreadable (%s); skipped", gpu_uuid, slot, explain(exc))
            continue
        instances.append(MigInstance(uuid=uuid, profile=profile_name(shape, table, memory_mb)))
    return instances


def _shape(attributes: Any) -> MigShape:
    return MigShape(
        gpu_instance_slices=int(attributes.gpuInstanceSliceCount),
        compute_instance_slices=int(attributes.computeInstanceSliceCount),
        memory_mb=int(attributes.memorySizeMB),
        decoders=int(getattr(attributes, "sharedDecoderCount", 0)),
        jpegs=int(getattr(attributes, "sharedJpegCount", 0)),
        ofas=int(getattr(attributes, "sharedOfaCount", 0)),
    )


def _profile_table(nvml: Any, handle: Any) -> list[ProfileInfo]:
    """The GPU's GPU-instance profiles that carry a name; empty where the driver cannot tell."""
    table: list[ProfileInfo] = []
    for profile in range(int(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT)):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)
        except nvml.NVMLError:
            continue  # a profile this GPU does not have (or an old driver): fall back to deriving
        name = text(getattr(info, "name", b""))
        if name:
            table.append(
                ProfileInfo(
                    name=name,
                    slices=int(info.sliceCount),
                    memory_mb=int(info.memorySizeMB),
                    decoders=int(info.decoderCount),
                    jpegs=int(info.jpegCount),
                    ofas=int(info.ofaCount),
                )
            )
    return table

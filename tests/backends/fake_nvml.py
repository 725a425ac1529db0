"""An in-memory stand-in for the NVIDIA driver as ``pynvml`` exposes it.

It offers exactly the ``pynvml`` functions and constants the local backend calls (an unexpected call is an
``AttributeError``), raises the real ``pynvml`` error classes (they need no driver), and insists on
``nvmlInit`` before any device call, so a leaked or missing session fails the test the way it would fail
on a real host. Devices are modelled on real cards: memory totals as ``nvidia-smi`` reports them and the
A100-80GB GPU-instance profile table of NVIDIA's MIG user guide.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

import pynvml as real

MIB = 1024 * 1024


@dataclass(frozen=True)
class Profile:
    index: int  # NVML_GPU_INSTANCE_PROFILE_* constant
    profile_id: int
    slices: int
    memory_mb: int
    decoders: int
    jpegs: int
    ofas: int


A100_80GB_PROFILES: dict[str, Profile] = {
    "1g.10gb": Profile(real.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 9728, 0, 0, 0),
    "1g.10gb+me": Profile(real.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1, 9728, 1, 1, 1),
    "1g.20gb": Profile(real.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 19968, 1, 0, 0),
    "2g.20gb": Profile(real.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 19968, 1, 0, 0),
    "3g.40gb": Profile(real.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 40192, 2, 0, 0),
    "4g.40gb": Profile(real.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 40192, 2, 0, 0),
    "7g.80gb": Profile(real.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 80896, 5, 1, 1),
}


@dataclass
class FakeMig:
    uuid: str
    profile: str
    compute_slices: int | None = None  # a compute instance smaller than its GPU instance ('1c.3g.40gb')


@dataclass
class FakeProcess:
    pid: int
    used_mb: int | None


@dataclass
class FakeGpu:
    uuid: str
    name: str
    memory_mb: int
    compute_capability: tuple[int, int]
    mig: bool | None = None  # None: the card has no MIG; False: MIG off; True: MIG on
    profiles: dict[str, Profile] = field(default_factory=dict)
    migs: list[FakeMig] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)
    lost: bool = False  # NVML answers 'GPU is lost' for this card


def a100_80gb_mig(uuid: str, migs: list[FakeMig]) -> FakeGpu:
    return FakeGpu(
        uuid=uuid,
        name="NVIDIA A100-SXM4-80GB",
        memory_mb=81920,
        compute_capability=(8, 0),
        mig=True,
        profiles=A100_80GB_PROFILES,
        migs=migs,
    )


def h100_80gb(uuid: str, processes: list[FakeProcess] | None = None) -> FakeGpu:
    return FakeGpu(
        uuid=uuid,
        name="NVIDIA H100 80GB HBM3",
        memory_mb=81559,
        compute_capability=(9, 0),
        mig=False,
        processes=processes or [],
    )


def l4(uuid: str) -> FakeGpu:
    return FakeGpu(uuid=uuid, name="NVIDIA L4", memory_mb=23034, compute_capability=(8, 9), mig=None)


@dataclass(frozen=True)
class _GpuHandle:
    gpu: FakeGpu


@dataclass(frozen=True)
class _MigHandle:
    parent: FakeGpu
    mig: FakeMig


MAX_MIG_DEVICES = 7


class FakeDriver:
    """State behind the fake module: the devices, and how often NVML was opened and closed."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        library_missing: bool = False,
        profile_table: bool = True,
        driver_version: str = "550.54.15",
    ) -> None:
        self.gpus = gpus
        self.library_missing = library_missing
        self.profile_table = profile_table
        self.driver_version = driver_version
        self.refcount = 0
        self.inits = 0

    # -- helpers -------------------------------------------------------------------------------------------

    @staticmethod
    def _error(code: int) -> Exception:
        error: Exception = real.NVMLError(code)
        return error

    def _ready(self) -> None:
        if self.refcount <= 0:
            raise self._error(real.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: Any) -> FakeGpu:
        self._ready()
        if not isinstance(handle, _GpuHandle):
            raise self._error(real.NVML_ERROR_INVALID_ARGUMENT)
        if handle.gpu.lost:
            raise self._error(real.NVML_ERROR_GPU_IS_LOST)
        return handle.gpu

    # -- the pynvml surface --------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.library_missing:
            raise self._error(real.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.refcount += 1
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self._ready()
        self.refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._ready()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._ready()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _GpuHandle:
        self._ready()
        if not 0 <= index < len(self.gpus):
            raise self._error(real.NVML_ERROR_INVALID_ARGUMENT)
        return _GpuHandle(self.gpus[index])

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        if isinstance(handle, _MigHandle):
            self._ready()
            return handle.mig.uuid
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        gpu = self._gpu(handle)
        used = sum(p.used_mb or 0 for p in gpu.processes) * MIB
        return types.SimpleNamespace(total=gpu.memory_mb * MIB, used=used, free=gpu.memory_mb * MIB - used)

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        return self._gpu(handle).compute_capability

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._gpu(handle)
        if gpu.mig is None:
            raise self._error(real.NVML_ERROR_NOT_SUPPORTED)
        mode = real.NVML_DEVICE_MIG_ENABLE if gpu.mig else real.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        gpu = self._gpu(handle)
        return MAX_MIG_DEVICES if gpu.mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> _MigHandle:
        gpu = self._gpu(handle)
        if not gpu.mig or index >= len(gpu.migs):
            raise self._error(real.NVML_ERROR_NOT_FOUND)
        return _MigHandle(gpu, gpu.migs[index])

    def nvmlDeviceGetAttributes(self, handle: Any) -> Any:
        self._ready()
        if not isinstance(handle, _MigHandle):
            raise self._error(real.NVML_ERROR_NOT_SUPPORTED)  # we only ever ask MIG devices
        profile = handle.parent.profiles[handle.mig.profile]
        return types.SimpleNamespace(
            multiprocessorCount=14 * profile.slices,
            sharedCopyEngineCount=profile.slices,
            sharedDecoderCount=profile.decoders,
            sharedEncoderCount=0,
            sharedJpegCount=profile.jpegs,
            sharedOfaCount=profile.ofas,
            gpuInstanceSliceCount=profile.slices,
            computeInstanceSliceCount=handle.mig.compute_slices or profile.slices,
            memorySizeMB=profile.memory_mb,
        )

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: int, version: int = 2) -> Any:
        gpu = self._gpu(handle)
        if not self.profile_table:
            raise self._error(real.NVML_ERROR_FUNCTION_NOT_FOUND)
        for name, row in gpu.profiles.items():
            if row.index == profile:
                return types.SimpleNamespace(
                    version=real.nvmlGpuInstanceProfileInfo_v2,
                    id=row.profile_id,
                    isP2pSupported=0,
                    sliceCount=row.slices,
                    instanceCount=1,
                    multiprocessorCount=14 * row.slices,
                    copyEngineCount=row.slices,
                    decoderCount=row.decoders,
                    encoderCount=0,
                    jpegCount=row.jpegs,
                    ofaCount=row.ofas,
                    memorySizeMB=row.memory_mb,
                    name=f"MIG {name}".encode(),  # a c_char array: bytes, as the real struct gives
                )
        raise self._error(real.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        gpu = self._gpu(handle)
        return [
            types.SimpleNamespace(
                pid=p.pid,
                usedGpuMemory=None if p.used_mb is None else p.used_mb * MIB,
                gpuInstanceId=0xFFFFFFFF,
                computeInstanceId=0xFFFFFFFF,
            )
            for p in gpu.processes
        ]


_FUNCTIONS = [name for name in vars(FakeDriver) if name.startswith("nvml")]
_CONSTANTS = ["NVML_DEVICE_MIG_ENABLE", "NVML_GPU_INSTANCE_PROFILE_COUNT"]


def fake_pynvml(driver: FakeDriver) -> types.ModuleType:
    """A module object with the driver's functions, the constants we use and every NVMLError class."""
    module = types.ModuleType("pynvml")
    for name in _FUNCTIONS:
        setattr(module, name, getattr(driver, name))
    for name in _CONSTANTS:
        setattr(module, name, getattr(real, name))
    for name in dir(real):
        if name.startswith("NVMLError"):
            setattr(module, name, getattr(real, name))
    module.driver = driver  # type: ignore[attr-defined]  # the fake's handle on its devices
    return module

"""The one place that touches ``pynvml`` (nvidia-ml-py): importing it, opening a session, and turning its
errors into a single line a person can act on.

Everything else in the local backend asks this module for the API object, so tests can swap in a fake of
the driver by replacing :data:`pynvml` here, and so a host without a driver degrades to one clear sentence
instead of a traceback.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any


class DiscoveryError(RuntimeError):
    """NVML cannot be used on this host. ``str()`` is one line that says why and what to do."""


def _import_pynvml() -> Any:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


pynvml: Any = _import_pynvml()
"""The NVML bindings, or ``None`` where the ``nvml`` extra is not installed."""

_EXPLANATIONS = {
    "NVMLError_LibraryNotFound": (
        "no NVIDIA driver on this host (libnvidia-ml.so.1 not found); it has no GPUs to offer"
    ),
    "NVMLError_DriverNotLoaded": "the NVIDIA driver is installed but not loaded (is the kernel module in?)",
    "NVMLError_NoPermission": "no permission to query the NVIDIA driver (NVML); run the agent as a user "
    "that can open /dev/nvidia*",
    "NVMLError_LibRmVersionMismatch": (
        "the NVIDIA user-space library and kernel module versions differ; reboot or reload the driver"
    ),
    "NVMLError_GpuIsLost": "a GPU fell off the bus (NVML: GPU is lost); the host needs attention",
}


def api() -> Any:
    """The NVML module, or :class:`DiscoveryError` where nvidia-ml-py is missing."""
    if pynvml is None:
        raise DiscoveryError("nvidia-ml-py is not installed; install 'respools[nvml]' to discover GPUs")
    return pynvml


def explain(error: BaseException) -> str:
    """One line for an NVML error: a known cause in words, else NVML's own message."""
    for cls in type(error).__mro__:
        if cls.__name__ in _EXPLANATIONS:
            return _EXPLANATIONS[cls.__name__]
    return f"NVML error: {error}"


def is_error(error: BaseException, *names: str) -> bool:
    """Whether ``error`` is one of NVML's error classes by name (``NVMLError_NotFound``...).

    Matching by name keeps callers independent of which module object raised it."""
    return any(cls.__name__ in names for cls in type(error).__mro__)


def text(value: Any) -> str:
    """NVML strings arrive as ``str`` from most calls but as ``bytes`` from struct fields."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def mig_enabled(nvml: Any, handle: Any) -> bool:
    """Current (not pending) MIG mode of a GPU; GPUs without MIG support answer 'not supported'."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError as exc:
        if is_error(exc, "NVMLError_NotSupported", "NVMLError_FunctionNotFound"):
            return False
        raise
    return bool(int(current) == int(nvml.NVML_DEVICE_MIG_ENABLE))


@contextlib.contextmanager
def nvml_session() -> Iterator[Any]:
    """Initialise NVML for the duration of a block and yield the API module.

    NVML reference-counts ``nvmlInit``/``nvmlShutdown``, so an agent that holds an outer session for its
    lifetime makes every inner one cheap, while one-off callers still release the library."""
    nvml = api()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise DiscoveryError(explain(exc)) from None
    try:
        yield nvml
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()

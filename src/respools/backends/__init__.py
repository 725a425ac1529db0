"""Stack backends: the plugin protocol, the registry that finds plugins by entry point, and the builtin
``local`` backend (imported lazily through the registry, so importing this package needs no NVML)."""

from respools.backends.protocol import Backend, BackendError, Realization
from respools.backends.registry import available_backends, get_backend

__all__ = ["Backend", "BackendError", "Realization", "available_backends", "get_backend"]

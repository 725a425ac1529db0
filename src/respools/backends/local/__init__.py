"""The ``local`` backend: NVML discovery, ``CUDA_VISIBLE_DEVICES`` realization with memory caps for
fractions, an over-use watchdog and process-group stopping. See ``docs/backends-local.md``."""

from respools.backends.local.backend import LocalBackend
from respools.backends.local.holders import register_holder, unregister_holder
from respools.backends.local.nvml import DiscoveryError

__all__ = ["DiscoveryError", "LocalBackend", "register_holder", "unregister_holder"]

"""Hold TensorFlow to a fractional lease's memory share.

TensorFlow reads no environment variable for a memory limit; the realization only sets
``TF_FORCE_GPU_ALLOW_GROWTH=true`` so that TensorFlow stops taking the whole GPU at start-up. A process that
wants a hard cap calls :func:`apply_tf_memory_cap` before TensorFlow touches the GPU: it configures one
logical device per visible GPU with ``memory_limit`` set to the lease's cap in MiB
(``RESPOOLS_GPU_MEMORY_MB_PER_DEVICE`` / ``RESPOOLS_GPU_MEMORY_MB``).

tensorflow is optional: without it, or without a cap in MiB, this does nothing.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping

from respools.backends.local.caps import read_memory_mb

log = logging.getLogger(__name__)


def apply_tf_memory_cap(environ: Mapping[str, str] | None = None) -> dict[int, int]:
    """Cap every visible GPU; answers ``{device index: MiB}`` for the devices capped."""
    env = os.environ if environ is None else environ
    try:
        tf = importlib.import_module("tensorflow")
    except ImportError:
        log.debug("tensorflow is not installed; no TensorFlow memory cap applied")
        return {}
    gpus = list(tf.config.list_physical_devices("GPU"))
    applied: dict[int, int] = {}
    for index, (gpu, limit) in enumerate(zip(gpus, read_memory_mb(env, len(gpus)), strict=True)):
        if limit is None:
            continue
        tf.config.set_logical_device_configuration(gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)])
        applied[index] = limit
    return applied

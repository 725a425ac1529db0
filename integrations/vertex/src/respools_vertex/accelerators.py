"""Which Vertex accelerator a pool's GPUs are: ``settings.accelerator_type``, else its ``gpu_class``.

Vertex names accelerators by enum (``NVIDIA_A100_80GB``); respools pools name a GPU class (``a100-80gb``,
``h100``). Both spellings are accepted, and the name is checked against the library's own
:class:`~google.cloud.aiplatform_v1.types.AcceleratorType` so a typo fails at pool definition.
"""

from __future__ import annotations

import re

from google.cloud.aiplatform_v1.types import AcceleratorType

from respools.backends.protocol import BackendError
from respools.model import PoolSpec
from respools_vertex.settings import VertexSettings

_CLASS_ALIASES = {
    "a100": "NVIDIA_TESLA_A100",
    "a100-40gb": "NVIDIA_TESLA_A100",
    "a100-80gb": "NVIDIA_A100_80GB",
    "h100": "NVIDIA_H100_80GB",
    "h100-80gb": "NVIDIA_H100_80GB",
    "h100-mega": "NVIDIA_H100_MEGA_80GB",
    "h100-mega-80gb": "NVIDIA_H100_MEGA_80GB",
    "h200": "NVIDIA_H200_141GB",
    "h200-141gb": "NVIDIA_H200_141GB",
    "b200": "NVIDIA_B200",
    "gb200": "NVIDIA_GB200",
    "l4": "NVIDIA_L4",
    "t4": "NVIDIA_TESLA_T4",
    "v100": "NVIDIA_TESLA_V100",
    "p100": "NVIDIA_TESLA_P100",
    "p4": "NVIDIA_TESLA_P4",
}


def pool_accelerator(pool: PoolSpec, settings: VertexSettings) -> str:
    """The pool's accelerator as a ``AcceleratorType`` member name."""
    named = settings.accelerator_type or pool.gpu_class
    if named is None:
        raise BackendError(
            f"pool {pool.name!r}: a vertex pool needs its accelerator: set settings.accelerator_type "
            "(e.g. NVIDIA_A100_80GB) or gpu_class (e.g. a100-80gb)"
        )
    accelerator = accelerator_name(named)
    if accelerator is None:
        raise BackendError(
            f"pool {pool.name!r}: {named!r} is not a Vertex accelerator; use one of "
            f"{', '.join(sorted(_CLASS_ALIASES))} or an AcceleratorType name"
        )
    return accelerator


def accelerator_name(named: str) -> str | None:
    """``NVIDIA_A100_80GB``, ``a100-80gb`` or ``NVIDIA A100 80GB`` → ``NVIDIA_A100_80GB``; None if unknown."""
    if named.upper() in AcceleratorType.__members__:
        return named.upper()
    slug = re.sub(r"[^a-z0-9]+", "-", named.lower())
    slug = re.sub(r"\b(nvidia|tesla)\b", "", slug).strip("-")
    return _CLASS_ALIASES.get(re.sub(r"-+", "-", slug))

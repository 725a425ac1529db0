"""Label and annotation names respools reads and writes on Kubernetes objects, and their value rules."""

from __future__ import annotations

import re

from respools.backends.protocol import BackendError

LEASE_LABEL = "respools.io/lease-id"
"""On every pod respools realizes; ``stop`` finds the lease's pods by it."""
POOL_ANNOTATION = "respools.io/pool"
SUBJECT_ANNOTATION = "respools.io/subject"

HOSTNAME_LABEL = "kubernetes.io/hostname"
PRODUCT_LABEL = "nvidia.com/gpu.product"
"""GPU feature discovery's product name, e.g. ``NVIDIA-A100-SXM4-80GB``; overridden to
``<model>-MIG-<profile>`` under the single MIG strategy."""
MEMORY_LABEL = "nvidia.com/gpu.memory"
COUNT_LABEL = "nvidia.com/gpu.count"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_PRODUCT_INFIX = "-MIG-"

HAMI_REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
"""HAMi's per-node device list (JSON): real GPU UUIDs, which node labels do not carry."""

_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NVIDIA_PREFIX = "NVIDIA-"


def lease_label_value(lease_id: str) -> str:
    """The lease id as a label value; refused (not mangled) when Kubernetes would reject it, because
    ``stop`` must find the pod by exactly this value."""
    if len(lease_id) > 63 or not _LABEL_VALUE_RE.match(lease_id):
        raise BackendError(
            f"lease id {lease_id!r} is not a valid Kubernetes label value "
            "(at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric)"
        )
    return lease_id


def product_label_values(model: str) -> list[str]:
    """The ``nvidia.com/gpu.product`` values a GPU model may carry.

    The string varies with driver and feature-discovery version (``NVIDIA-A100-SXM4-40GB`` or
    ``A100-SXM4-40GB``; NVML's ``NVIDIA A100-SXM4-40GB`` with spaces as dashes), so a node is matched against
    every spelling rather than one guess.
    """
    dashed = re.sub(r"\s+", "-", model.strip())
    bare = dashed[len(_NVIDIA_PREFIX) :] if dashed.upper().startswith(_NVIDIA_PREFIX) else dashed
    return sorted({dashed, bare, _NVIDIA_PREFIX + bare})


def mig_product_label_values(model: str, profile: str) -> list[str]:
    """Product values of single-strategy MIG nodes whose slices are ``profile`` of ``model``."""
    return [f"{value}{MIG_PRODUCT_INFIX}{profile}" for value in product_label_values(model)]


def split_mig_product(product: str) -> tuple[str, str | None]:
    """``A100-SXM4-40GB-MIG-1g.5gb`` → (``A100-SXM4-40GB``, ``1g.5gb``); other products → (product, None)."""
    model, infix, profile = product.rpartition(MIG_PRODUCT_INFIX)
    if not infix or not model or not profile:
        return product, None
    return model, profile

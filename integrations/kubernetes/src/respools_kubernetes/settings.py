"""The pool settings the Kubernetes backend reads.

They are parsed strictly (unknown keys are errors) so that a typo such as ``fraction_mod`` fails when the
pool is defined, not when the first fractional lease is realized on a cluster that ignores it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from respools.backends.protocol import BackendError
from respools.model import PoolSpec

FractionMode = Literal["hami", "runai"]
"""How a GPU fraction is asked for: HAMi's ``nvidia.com/gpumem`` resource or Run:ai/KAI's ``gpu-fraction``
annotation. Clusters run one or the other (or neither), so the pool says which."""

MigStrategy = Literal["mixed", "single"]
"""The NVIDIA device plugin's MIG strategy: ``mixed`` exposes ``nvidia.com/mig-<profile>`` resources,
``single`` exposes every slice as ``nvidia.com/gpu`` on nodes labelled ``<model>-MIG-<profile>``."""


class KubernetesSettings(BaseModel):
    """``PoolSpec.settings`` of a ``kubernetes`` pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(default="default", min_length=1, description="where the pool's pods run")
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="labels of the nodes that make up the pool: filters discovery and pins every pod",
    )
    fraction_mode: FractionMode | None = Field(
        default=None, description="GPU sharing layer on the cluster; without one the pool has no fractions"
    )
    mig_strategy: MigStrategy = "mixed"
    gpu_products: list[str] = Field(
        default_factory=list,
        description="GPU models (product label, e.g. 'NVIDIA-A100-SXM4-80GB') of a pool without inventory; "
        "single-strategy MIG needs them to select '<model>-MIG-<profile>' nodes",
    )
    scheduler_name: str | None = Field(
        default=None, description="pod scheduler; Run:ai fractions default to 'runai-scheduler'"
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="extra tolerations (API form) for the pool's GPU node taints"
    )
    gpu_memory_mb: int | None = Field(
        default=None, gt=0, description="GPU memory of nodes whose labels do not say (no feature discovery)"
    )
    kubeconfig: str | None = Field(default=None, description="kubeconfig file; default: the usual lookup")
    context: str | None = Field(default=None, description="kubeconfig context; default: the current one")
    in_cluster: bool = Field(default=False, description="use the service account of the pod respools runs in")


def settings_of(pool: PoolSpec) -> KubernetesSettings:
    """Parse a pool's settings, turning validation errors into one :class:`BackendError` line."""
    try:
        return KubernetesSettings.model_validate(pool.settings)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'settings'}: {error['msg']}" for error in exc.errors()
        )
        raise BackendError(f"pool {pool.name!r}: invalid kubernetes settings: {problems}") from None

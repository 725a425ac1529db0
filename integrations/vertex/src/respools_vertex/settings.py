"""The pool settings the Vertex AI backend reads, parsed strictly so a typo fails at pool definition."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from respools.backends.protocol import BackendError
from respools.model import PoolSpec


class VertexSettings(BaseModel):
    """``PoolSpec.settings`` of a ``vertex`` pool: one accelerator type in one project and region."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    project: str | None = Field(default=None, description="Google Cloud project; needed to read quota and stop jobs")
    region: str = Field(default="us-central1", min_length=1)
    accelerator_type: str | None = Field(
        default=None, description="Vertex accelerator (e.g. NVIDIA_A100_80GB); default: from the pool's gpu_class"
    )
    machine_types: dict[int, str] = Field(
        default_factory=dict, description="GPU count → machine type, where the default shape is not wanted"
    )
    spot: bool = Field(default=False, description="run on Spot VMs (their own, preemptible quota)")
    gpu_quota: int | None = Field(
        default=None, ge=0, description="GPUs the pool may use; default: the project's quota, read from Google"
    )
    api_endpoint: str | None = Field(
        default=None,
        description="Vertex AI API endpoint; default: {region}-aiplatform.googleapis.com. An http:// endpoint "
        "is a local emulator and is called without credentials",
    )
    quota_metric: str | None = Field(
        default=None, description="Vertex quota metric, for accelerators respools has no metric name for"
    )


def settings_of(pool: PoolSpec) -> VertexSettings:
    """Parse a pool's settings, turning validation errors into one :class:`BackendError` line."""
    try:
        return VertexSettings.model_validate(pool.settings)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'settings'}: {error['msg']}" for error in exc.errors()
        )
        raise BackendError(f"pool {pool.name!r}: invalid vertex settings: {problems}") from None

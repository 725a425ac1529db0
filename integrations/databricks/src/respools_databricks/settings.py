"""The pool settings the Databricks backend reads, parsed strictly so a typo fails at pool definition."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from respools.backends.protocol import BackendError
from respools.model import PoolSpec


class DatabricksSettings(BaseModel):
    """``PoolSpec.settings`` of a ``databricks`` pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str | None = Field(default=None, description="workspace URL; default: the SDK's usual lookup")
    profile: str | None = Field(default=None, description="~/.databrickscfg profile")
    spark_version: str | None = Field(
        default=None, description="GPU ML runtime, e.g. 15.4.x-gpu-ml-scala2.12; default: the latest LTS one"
    )
    node_types: dict[int, str] = Field(
        default_factory=dict,
        description="GPUs per node → node type id; default: the smallest workspace node type with that many",
    )
    driver_node_type_id: str | None = Field(
        default=None, description="driver of multi-node GPU clusters (a CPU type, so all leased GPUs are workers)"
    )
    cluster_id: str | None = Field(default=None, description="shared GPU cluster on which fractions run")


def settings_of(pool: PoolSpec) -> DatabricksSettings:
    """Parse a pool's settings, turning validation errors into one :class:`BackendError` line."""
    try:
        return DatabricksSettings.model_validate(pool.settings)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'settings'}: {error['msg']}" for error in exc.errors()
        )
        raise BackendError(f"pool {pool.name!r}: invalid databricks settings: {problems}") from None

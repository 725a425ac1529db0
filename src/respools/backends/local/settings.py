"""The pool settings the local backend understands (``PoolSpec.settings`` of a ``stack: local`` pool).

Unknown keys are refused rather than ignored: a misspelt ``preempt_on_overuse`` would otherwise silently
leave over-use unpunished, which is exactly the failure a platform team would not notice.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from respools.backends.protocol import BackendError
from respools.model import PoolSpec


class LocalSettings(BaseModel):
    """Knobs of the local backend, with defaults that are safe on a shared workstation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preempt_on_overuse: bool = Field(
        default=False,
        description="ask the server to preempt a lease whose processes use more GPU memory than its cap",
    )
    overuse_tolerance_mb: int = Field(
        default=512,
        ge=0,
        description=(
            "slack above a fraction's memory cap before the watchdog reports it: NVML counts the CUDA "
            "context (a few hundred MB), which framework caps do not"
        ),
    )
    stop_kill_after_s: float = Field(
        default=10.0,
        ge=0,
        description="seconds between SIGTERM and SIGKILL when a lease's workload is stopped",
    )


def local_settings(pool: PoolSpec) -> LocalSettings:
    """Parse a pool's settings, turning a validation error into one :class:`BackendError` line."""
    try:
        return LocalSettings.model_validate(pool.settings)
    except ValidationError as exc:
        problems = "; ".join(f"settings.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        known = ", ".join(LocalSettings.model_fields)
        raise BackendError(f"pool {pool.name!r}: {problems} (the local stack knows {known})") from None

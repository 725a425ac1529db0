"""What :func:`respools_zenml.step` records on a step, and where.

The options live in the step's ``extra`` under :data:`EXTRA_KEY`, not in its ``settings``: ZenML validates
``settings["orchestrator"]`` against whichever orchestrator is active, so a step decorated for respools
would fail to compile on a stack without a pooled orchestrator. ``extra`` travels with the snapshot
unchanged, so the pooled orchestrator (and its step processes and pods) read back exactly what the
decorator wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from respools_zenml.demand import DemandError

EXTRA_KEY = "respools"


class StepOptions(BaseModel):
    """respools options of one step; ``None`` means "not said here", so pipeline-level settings apply."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resources: dict[str, float] = Field(default_factory=dict, description="respools keys in wire form")
    preemptible: bool | None = None
    priority: int | None = None
    pool: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)

    def to_extra(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_defaults=True)

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> StepOptions | None:
        """The options a decorated step carries; ``None`` for a step not decorated by respools_zenml.step
        (a bare ``@respools_zenml.step`` still asks for a lease: one step slot)."""
        raw = extra.get(EXTRA_KEY)
        if raw is None:
            return None
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise DemandError(f"step extra[{EXTRA_KEY!r}] is not what respools_zenml.step writes: {exc}") from None

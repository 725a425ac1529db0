"""What both pooled orchestrators do *inside* a step's process or pod: hold the lease the orchestrator
was granted (see :mod:`respools_zenml.holding`) and record it on the step run.

A pooled step's environment carries its :class:`~respools_zenml.leasing.LeaseArgs`; ZenML's step runner
calls these component hooks there, because the step's stack has the pooled orchestrator. Elsewhere (the
orchestrator's own process, steps that run without a lease) the hooks do nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from zenml.metadata.metadata_types import MetadataType

from respools_zenml.holding import HOLDER
from respools_zenml.leasing import LeaseArgs
from respools_zenml.metadata import METADATA_KEY
from respools_zenml.settings import RespoolsConnection

if TYPE_CHECKING:
    from zenml.config.step_run_info import StepRunInfo

log = logging.getLogger(__name__)


def in_step_process() -> bool:
    """Whether this process runs one pooled step (its environment carries the lease's arguments)."""
    return LeaseArgs.from_env() is not None


def hold_for_step(info: StepRunInfo, connection: RespoolsConnection) -> None:
    """``prepare_step_run``: enter the step's lease in the step's thread."""
    args = LeaseArgs.from_env()
    if args is None or args.step_name != info.pipeline_step_name:
        return
    HOLDER.hold(args, connection.respools_client())


def step_metadata() -> dict[str, MetadataType]:
    """``get_step_run_metadata``: the lease, for the step run's metadata (empty without one)."""
    record: dict[str, Any] = HOLDER.metadata()
    return {METADATA_KEY: record} if record else {}


def release_for_step(step_failed: bool) -> None:
    """``cleanup_step_run``: leave the lease as the step ended."""
    HOLDER.release(step_failed)

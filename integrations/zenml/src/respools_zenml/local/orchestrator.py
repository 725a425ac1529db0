"""The pooled local orchestrator: ZenML's local orchestrator, with each pooled step run under a respools
lease in a process of its own.

Steps that ask for nothing run in-process exactly as on the local orchestrator. A pooled step (one with
``ResourceSettings`` quantities, or decorated by :func:`respools_zenml.step`) is queued with respools
first; once granted, it runs in a child process that holds the lease (heartbeats, ``LeasePreempted``
raised in the step, realization such as ``CUDA_VISIBLE_DEVICES``) while this process watches the lease and
kills the child at the preemption deadline. The lease always ends with the step.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from zenml.config.base_settings import BaseSettings
from zenml.config.step_configurations import Step
from zenml.constants import ENV_ZENML_ACTIVE_PROJECT_ID, ENV_ZENML_ACTIVE_STACK_ID
from zenml.metadata.metadata_types import MetadataType
from zenml.orchestrators.local.local_orchestrator import LocalOrchestrator, LocalOrchestratorConfig
from zenml.utils import source_utils

from respools_zenml.caching import would_be_cached
from respools_zenml.identity import StepIdentity
from respools_zenml.leasing import LeaseArgs
from respools_zenml.local.supervisor import Launch, StepProcessSupervisor
from respools_zenml.resolve import step_demand
from respools_zenml.settings import RespoolsConnection, RespoolsSettings
from respools_zenml.step_hooks import hold_for_step, in_step_process, release_for_step, step_metadata

if TYPE_CHECKING:
    from zenml.config.step_run_info import StepRunInfo
    from zenml.models import PipelineRunResponse, PipelineSnapshotResponse
    from zenml.orchestrators import SubmissionResult
    from zenml.stack import Stack

log = logging.getLogger(__name__)


class PooledLocalOrchestratorConfig(LocalOrchestratorConfig, RespoolsSettings, RespoolsConnection):
    """The local orchestrator's config plus where the respools server is and the stack-wide defaults of
    :class:`~respools_zenml.settings.RespoolsSettings`."""


class PooledLocalOrchestrator(LocalOrchestrator):
    """Runs pipelines locally, leasing pooled steps from respools (see the module docstring)."""

    _run: PipelineRunResponse | None = None

    @property
    def config(self) -> PooledLocalOrchestratorConfig:
        return cast(PooledLocalOrchestratorConfig, self._config)

    @property
    def settings_class(self) -> type[BaseSettings]:
        return RespoolsSettings

    @property
    def supports_dynamic_pipelines(self) -> bool:
        """Dynamic pipelines launch steps without ``run_step``, where no lease would be taken."""
        return False

    @property
    def run_init_cleanup_at_step_level(self) -> bool:
        """A pooled step's process does not share this process's memory, so it runs the pipeline's init and
        cleanup hooks itself, as on orchestrators that isolate every step."""
        return in_step_process()

    @staticmethod
    def requires_resources_in_orchestration_environment(step: Step) -> bool:
        """Step resources are respools' business here, so the local orchestrator's warning that it ignores
        them does not apply."""
        return False

    def submit_pipeline(
        self,
        snapshot: PipelineSnapshotResponse,
        stack: Stack,
        base_environment: dict[str, str],
        step_environments: dict[str, dict[str, str]],
        placeholder_run: PipelineRunResponse | None = None,
    ) -> SubmissionResult | None:
        """The local orchestrator's submission; remembers the run (to label requests, to check the cache)."""
        self._run = placeholder_run
        return super().submit_pipeline(snapshot, stack, base_environment, step_environments, placeholder_run)

    def run_step(self, step: Step) -> None:
        settings = cast(RespoolsSettings, self.get_settings(step))
        demand = step_demand(step.config, settings)
        if demand is None:
            super().run_step(step)
            return
        snapshot = self._active_snapshot
        assert snapshot is not None, "run_step runs inside a pipeline run"
        if would_be_cached(snapshot, self._run, step.spec.invocation_id):
            super().run_step(step)  # served from ZenML's cache in-process: no code runs, no GPUs needed
            return
        identity = StepIdentity(
            orchestrator_run_id=self.get_orchestrator_run_id(),
            step_name=step.spec.invocation_id,
            pipeline_name=snapshot.pipeline_configuration.name,
            run_name=self._run.name if self._run is not None else None,
            user=snapshot.user.name if snapshot.user else None,
        )
        launch = Launch(
            snapshot_id=snapshot.id,
            step=step,
            orchestrator_run_id=identity.orchestrator_run_id,
            source_root=source_utils.get_source_root(),
            env=_process_env(snapshot.stack.id if snapshot.stack else None, snapshot.project_id),
        )
        args = LeaseArgs.for_step(demand, identity)
        with self.config.respools_client() as client:
            StepProcessSupervisor(client, args, identity, launch).run()

    # -- inside the step's process ------------------------------------------------------------------

    def prepare_step_run(self, info: StepRunInfo) -> None:
        hold_for_step(info, self.config)

    def get_step_run_metadata(self, info: StepRunInfo) -> dict[str, MetadataType]:
        return step_metadata()

    def cleanup_step_run(self, info: StepRunInfo, step_failed: bool) -> None:
        release_for_step(step_failed)


def _process_env(stack_id: object, project_id: object) -> dict[str, str]:
    """The step's process must use the run's stack and project whatever the global configuration says."""
    env = {ENV_ZENML_ACTIVE_PROJECT_ID: str(project_id)}
    if stack_id is not None:
        env[ENV_ZENML_ACTIVE_STACK_ID] = str(stack_id)
    return env

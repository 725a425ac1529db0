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
import os
import sys
from typing import TYPE_CHECKING, cast

from pydantic import Field
from zenml.client import Client as ZenClient
from zenml.config.base_settings import BaseSettings
from zenml.config.step_configurations import Step
from zenml.constants import ENV_ZENML_ACTIVE_PROJECT_ID, ENV_ZENML_ACTIVE_STACK_ID
from zenml.enums import ExecutionStatus
from zenml.metadata.metadata_types import MetadataType
from zenml.orchestrators.local.local_orchestrator import LocalOrchestrator, LocalOrchestratorConfig
from zenml.orchestrators.utils import get_step_entrypoint_command
from zenml.step_operators.step_operator_entrypoint_configuration import StepOperatorEntrypointConfiguration
from zenml.utils import source_utils

from respools_zenml.caching import would_be_cached
from respools_zenml.demand import DemandError
from respools_zenml.identity import StepIdentity, run_url
from respools_zenml.leasing import LeaseArgs
from respools_zenml.local.isolated import IsolatedStep, IsolatedSteps
from respools_zenml.local.step_process import command, warm_command
from respools_zenml.local.supervisor import Launch, StepProcessSupervisor
from respools_zenml.local.warm import WarmSpare
from respools_zenml.resolve import step_demand
from respools_zenml.settings import RespoolsConnection, RespoolsSettings
from respools_zenml.step_hooks import hold_for_step, in_step_process, release_for_step, step_metadata

if TYPE_CHECKING:
    from zenml.config.step_run_info import StepRunInfo
    from zenml.models import PipelineRunResponse, PipelineSnapshotResponse, StepRunResponse
    from zenml.orchestrators import SubmissionResult
    from zenml.stack import Stack

log = logging.getLogger(__name__)

ISOLATED_ENV = "RESPOOLS_ZENML_ISOLATED_STEP"
"""Set in the process of a dynamic pipeline's isolated step (with or without a lease)."""


class PooledLocalOrchestratorConfig(LocalOrchestratorConfig, RespoolsSettings, RespoolsConnection):
    """The local orchestrator's config plus where the respools server is and the stack-wide defaults of
    :class:`~respools_zenml.settings.RespoolsSettings`."""

    warm_step_process: bool = Field(
        default=True,
        description="keep one step process started ahead (ZenML imported, no lease, no user code), so a "
        "granted step does not wait for Python to start; False starts every step's process at its grant",
    )


class PooledLocalOrchestrator(LocalOrchestrator):
    """Runs pipelines locally, leasing pooled steps from respools (see the module docstring)."""

    _run: PipelineRunResponse | None = None
    _isolated_steps: IsolatedSteps | None = None
    _spare: WarmSpare | None = None

    @property
    def config(self) -> PooledLocalOrchestratorConfig:
        return cast(PooledLocalOrchestratorConfig, self._config)

    @property
    def settings_class(self) -> type[BaseSettings]:
        return RespoolsSettings

    @property
    def supports_dynamic_pipelines(self) -> bool:
        """Dynamic pipelines run their pooled steps isolated, each under its own lease (:mod:`.isolated`)."""
        return True

    @property
    def run_init_cleanup_at_step_level(self) -> bool:
        """A pooled or isolated step's process does not share this process's memory, so it runs the
        pipeline's init and cleanup hooks itself, as on orchestrators that isolate every step."""
        return in_step_process() or bool(os.environ.get(ISOLATED_ENV))

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
        """The local orchestrator's submission; remembers the run (to label requests, to check the cache) and
        keeps a warm step process ready for its pooled steps (:mod:`.warm`)."""
        self._run = placeholder_run
        env = {**os.environ, **_process_env(snapshot.stack.id if snapshot.stack else None, snapshot.project_id)}
        self._spare = (
            WarmSpare(warm_command(source_utils.get_source_root()), env) if self.config.warm_step_process else None
        )
        try:
            return super().submit_pipeline(snapshot, stack, base_environment, step_environments, placeholder_run)
        finally:
            if self._spare is not None:
                self._spare.close()
            self._spare = None

    def submit_dynamic_pipeline(
        self,
        snapshot: PipelineSnapshotResponse,
        stack: Stack,
        environment: dict[str, str],
        placeholder_run: PipelineRunResponse | None = None,
    ) -> SubmissionResult | None:
        """The local orchestrator's dynamic submission; remembers the run (to label requests)."""
        self._run = placeholder_run
        return super().submit_dynamic_pipeline(snapshot, stack, environment, placeholder_run)

    # -- a dynamic pipeline's isolated steps --------------------------------------------------------

    @property
    def _isolated(self) -> IsolatedSteps:
        if self._isolated_steps is None:
            self._isolated_steps = IsolatedSteps()
        return self._isolated_steps

    def submit_isolated_step(self, step_run_info: StepRunInfo, environment: dict[str, str]) -> None:
        """Start the step's thread: it waits for the grant, then runs ZenML's step entrypoint under the
        lease in a process of its own (a step that asks for nothing runs there without one)."""
        name = step_run_info.pipeline_step_name
        snapshot = step_run_info.snapshot
        command, arguments = get_step_entrypoint_command(
            invocation_id=name,
            config=step_run_info.config,
            entrypoint_config_class=StepOperatorEntrypointConfiguration,
            snapshot_id=snapshot.id,
            step_run_id=str(step_run_info.step_run_id),
        )
        source_root = source_utils.get_source_root()
        python_path = os.pathsep.join(p for p in (source_root, os.environ.get("PYTHONPATH")) if p)
        if command and command[0] in {"python", "python3"}:
            command = [sys.executable, *command[1:]]  # this interpreter: ZenML's entrypoint assumes an image's
        launch = Launch(
            argv=command + arguments,
            retry=None,  # ZenML retries an isolated step itself, as a new step run
            orchestrator_run_id=self.get_orchestrator_run_id(),
            env={
                **environment,
                **_process_env(snapshot.stack.id if snapshot.stack else None, snapshot.project_id),
                ISOLATED_ENV: "1",
                "PYTHONPATH": python_path,
            },
            step_run_id=step_run_info.step_run_id,
        )
        supervisor = None
        demand = step_demand(step_run_info.config, cast(RespoolsSettings, self.get_settings(step_run_info)))
        if demand is not None:
            identity = StepIdentity(
                orchestrator_run_id=launch.orchestrator_run_id,
                step_name=name,
                pipeline_name=step_run_info.pipeline.name,
                run_name=step_run_info.run_name,
                user=snapshot.user.name if snapshot.user else None,
                run_id=str(step_run_info.run_id),
                run_url=run_url(self._run),
            )
            args = LeaseArgs.for_step(demand, identity)
            supervisor = StepProcessSupervisor(self.config.respools_client(), args, identity, launch)
        self._isolated.add(IsolatedStep(name, launch, supervisor))

    def get_isolated_step_status(self, step_run: StepRunResponse) -> ExecutionStatus:
        isolated = self._isolated.get(step_run.id)
        if isolated is None:  # not started by this process: ZenML's own record is all there is
            return ZenClient().get_run_step(step_run.id, hydrate=False).status
        return isolated.status()

    def wait_for_isolated_step(self, step_run: StepRunResponse) -> ExecutionStatus:
        """Join the step's thread rather than poll with ZenML's backoff (up to 16 s late)."""
        isolated = self._isolated.get(step_run.id)
        return isolated.wait() if isolated is not None else super().wait_for_isolated_step(step_run)

    def stop_isolated_step(self, step_run: StepRunResponse) -> None:
        isolated = self._isolated.get(step_run.id)
        if isolated is not None:
            isolated.stop()

    def cleanup_isolated_step(self, step_run: StepRunResponse) -> None:
        self._isolated.forget(step_run.id)

    # -- a static pipeline's steps ------------------------------------------------------------------

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
            run_id=str(self._run.id) if self._run is not None else None,
            run_url=run_url(self._run),
        )
        launch = Launch(
            argv=command(snapshot.id, identity.step_name, identity.orchestrator_run_id, source_utils.get_source_root()),
            retry=step.config.retry,
            orchestrator_run_id=identity.orchestrator_run_id,
            env=_process_env(snapshot.stack.id if snapshot.stack else None, snapshot.project_id),
            spare=self._spare,
            order={
                "snapshot_id": str(snapshot.id),
                "step_name": identity.step_name,
                "orchestrator_run_id": identity.orchestrator_run_id,
            },
        )
        args = LeaseArgs.for_step(demand, identity)
        with self.config.respools_client() as client:
            StepProcessSupervisor(client, args, identity, launch).run()

    # -- inside the step's process ------------------------------------------------------------------

    def prepare_step_run(self, info: StepRunInfo) -> None:
        if info.snapshot.is_dynamic and not in_step_process():
            _refuse_inline_pooled_step(info, cast(RespoolsSettings, self.get_settings(info)))
        hold_for_step(info, self.config)

    def get_step_run_metadata(self, info: StepRunInfo) -> dict[str, MetadataType]:
        return step_metadata()

    def cleanup_step_run(self, info: StepRunInfo, step_failed: bool) -> None:
        release_for_step(step_failed)


def _refuse_inline_pooled_step(info: StepRunInfo, settings: RespoolsSettings) -> None:
    """A pooled step that a dynamic pipeline runs inline would run in this process, without a lease."""
    if step_demand(info.config, settings) is not None:
        raise DemandError(
            f"step {info.pipeline_step_name!r} asks for pooled resources but runs inline in this dynamic "
            "pipeline, where no lease can be held; give it runtime='isolated' (respools_zenml.step does so "
            "by default, and ZenML does for gpu_count/cpu_count/memory)"
        )


def _process_env(stack_id: object, project_id: object) -> dict[str, str]:
    """The step's process must use the run's stack and project whatever the global configuration says."""
    env = {ENV_ZENML_ACTIVE_PROJECT_ID: str(project_id)}
    if stack_id is not None:
        env[ENV_ZENML_ACTIVE_STACK_ID] = str(stack_id)
    return env

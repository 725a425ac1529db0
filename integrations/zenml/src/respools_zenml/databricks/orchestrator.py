"""The pooled Databricks orchestrator: ZenML's :class:`DatabricksOrchestrator`, whose pipeline runs hold a
respools lease for their job cluster.

ZenML's orchestrator builds a wheel of the user's code, uploads it to the workspace, creates one job whose
tasks (one per step, ``python_wheel_task``) share one job cluster, and starts it (``jobs/run-now``). All of
that stays ZenML's; the lease decides the cluster. One lease covers a run, since all its steps share the
cluster: the demand of its largest pooled step (``ResourceSettings(gpu_count=...)`` or
``respools_zenml.step``), with that step's ``StepRetryConfig`` as the retry budget. A pipeline whose steps
ask for nothing is submitted exactly as by ZenML's orchestrator.

The run's life is the lease's (the loop of ``respools run``, :class:`respools.client.jobs.JobRun`): the
request is queued while the run is *provisioning*; once granted, ZenML's submission runs with the job
cluster the ``databricks`` backend realizes for the lease (node type, workers, driver, GPU ML runtime,
single-node conf) and the lease's tags and environment (``RESPOOLS_URL``, ``RESPOOLS_LEASE_ID``,
``RESPOOLS_ATTEMPT``, a lease-scoped ``RESPOOLS_TOKEN``); the lease is heartbeated while the Databricks run
is queued or running and released once it is terminal. At a preemption deadline the run is cancelled;
its unfinished steps are failed in ZenML (so ZenML counts a retry), the request is requeued at its place,
and on the next grant the run's remaining steps are submitted again as a new job (attempt + 1) in the
*same* ZenML pipeline run: every job of the run names it (:data:`ORCHESTRATOR_RUN_ID_ENV`), so ZenML records
the preempted step as retried and the completed ones are not run again. Hence the orchestrator always
waits for its run (a lease lives in the process that holds it).

``host`` with ``http://`` is a local emulator (the tests' fake workspace): its jobs run on this machine,
so the stack may keep a local artifact store and ZenML store.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from databricks.sdk.service import compute
from pydantic import Field
from respools_databricks import DatabricksBackend
from respools_databricks.runner import run_tags
from respools_databricks.spec import LEASE_TAG, lease_tag_value
from zenml.client import Client as ZenClient
from zenml.config.step_configurations import Step
from zenml.integrations.databricks.flavors.databricks_orchestrator_flavor import (
    DatabricksOrchestratorConfig,
    DatabricksOrchestratorSettings,
)
from zenml.integrations.databricks.orchestrators.databricks_orchestrator import DatabricksOrchestrator
from zenml.orchestrators import SubmissionResult
from zenml.orchestrators.publish_utils import publish_failed_step_run
from zenml.stack import StackValidator

from respools.backends import BackendError
from respools.backends.jobs import JobLaunch, JobPhase
from respools.client.jobs import JobRun
from respools.model import GPU, PoolSpec
from respools_zenml.databricks.pipeline_runs import PipelineRunRunner
from respools_zenml.demand import StepDemand
from respools_zenml.identity import StepIdentity, run_url
from respools_zenml.leasing import LeaseArgs
from respools_zenml.resolve import step_demand
from respools_zenml.settings import RespoolsConnection, RespoolsSettings

if TYPE_CHECKING:
    from zenml.config.base_settings import BaseSettings
    from zenml.models import PipelineRunResponse, PipelineSnapshotResponse
    from zenml.stack import Stack

log = logging.getLogger(__name__)

DATABRICKS_STACK = "databricks"
ORCHESTRATOR_RUN_ID_ENV = "RESPOOLS_ZENML_ORCHESTRATOR_RUN_ID"
"""Set on every job cluster of a pooled run: the one ZenML run its attempts' jobs all belong to (ZenML's
orchestrator would take each job's own id, making every attempt a new pipeline run)."""
POLL_S = 5.0


class PooledDatabricksOrchestratorSettings(DatabricksOrchestratorSettings, RespoolsSettings):
    """ZenML's Databricks settings plus how the run asks respools for capacity. ``node_type_id``,
    ``num_workers``, ``driver_node_type_id`` and ``spark_version`` are the lease's while a run holds one."""


class PooledDatabricksOrchestratorConfig(DatabricksOrchestratorConfig, RespoolsSettings, RespoolsConnection):
    """ZenML's Databricks orchestrator config plus the respools connection and stack-wide defaults."""

    respools_poll_s: float = Field(
        default=POLL_S,
        gt=0,
        le=300,
        description="seconds between looks at a running job (and its lease's preemption deadline)",
    )

    @property
    def emulated(self) -> bool:
        """A local emulator of the workspace API, whose jobs run on this machine."""
        return self.host.startswith("http://")

    @property
    def is_remote(self) -> bool:
        return not self.emulated


@dataclass(frozen=True)
class PipelineSubmission:
    """What ZenML handed to ``submit_pipeline``, kept for each attempt's submission."""

    snapshot: PipelineSnapshotResponse
    stack: Stack
    base_environment: dict[str, str]
    step_environments: dict[str, dict[str, str]]
    placeholder_run: PipelineRunResponse | None
    orchestrator_run_id: str


@dataclass(frozen=True)
class LeasedCluster:
    """One attempt's lease, as ZenML's Databricks settings."""

    cluster: compute.ClusterSpec
    launch: JobLaunch
    orchestrator_run_id: str

    def apply(self, settings: DatabricksOrchestratorSettings) -> DatabricksOrchestratorSettings:
        cluster, tags = self.cluster, run_tags(self.launch)
        env = {
            **(settings.spark_env_vars or {}),
            **(cluster.spark_env_vars or {}),
            **self.launch.env,
            ORCHESTRATOR_RUN_ID_ENV: self.orchestrator_run_id,
        }
        return settings.model_copy(
            update={
                "spark_version": cluster.spark_version,
                "node_type_id": cluster.node_type_id,
                "num_workers": cluster.num_workers,
                "driver_node_type_id": cluster.driver_node_type_id,
                "spark_conf": {**(settings.spark_conf or {}), **(cluster.spark_conf or {})},
                "custom_tags": {**(settings.custom_tags or {}), **(cluster.custom_tags or {}), **tags},
                "spark_env_vars": env,
                "job_tags": {**(settings.job_tags or {}), LEASE_TAG: lease_tag_value(self.launch.lease.id)},
            }
        )


class PooledDatabricksOrchestrator(DatabricksOrchestrator):
    """Runs pipelines as Databricks jobs on the job clusters of their respools leases (module docstring)."""

    _leased: LeasedCluster | None = None

    @property
    def config(self) -> PooledDatabricksOrchestratorConfig:
        return cast(PooledDatabricksOrchestratorConfig, self._config)

    @property
    def settings_class(self) -> type[PooledDatabricksOrchestratorSettings]:
        return PooledDatabricksOrchestratorSettings

    @property
    def validator(self) -> StackValidator | None:
        """ZenML's check (no local components), except against a local emulator, whose jobs run here."""
        return StackValidator() if self.config.emulated else super().validator

    @staticmethod
    def requires_resources_in_orchestration_environment(step: Step) -> bool:
        """Step resources are the lease's business here, so ZenML's "ignoring resources" warning is wrong."""
        return False

    def get_orchestrator_run_id(self) -> str:
        """The pooled run's id on its jobs' clusters, so that every attempt's job joins the same ZenML run."""
        return os.environ.get(ORCHESTRATOR_RUN_ID_ENV) or super().get_orchestrator_run_id()

    def get_settings(self, container: Any) -> BaseSettings:
        """The run's settings; while an attempt is submitted, its job cluster is the lease's."""
        settings = super().get_settings(container)
        leased = self._leased
        if leased is None or isinstance(container, Step):
            return settings
        return leased.apply(cast(DatabricksOrchestratorSettings, settings))

    def submit_pipeline(
        self,
        snapshot: PipelineSnapshotResponse,
        stack: Stack,
        base_environment: dict[str, str],
        step_environments: dict[str, dict[str, str]],
        placeholder_run: PipelineRunResponse | None = None,
    ) -> SubmissionResult | None:
        """ZenML's submission for a pipeline that asks for nothing; otherwise the leased run (module
        docstring), which ZenML waits for."""
        demand = self.pipeline_demand(snapshot)
        if demand is None:
            return super().submit_pipeline(snapshot, stack, base_environment, step_environments, placeholder_run)
        if snapshot.schedule:
            raise ValueError(
                "the pooled Databricks orchestrator cannot run a scheduled pipeline: its runs would start "
                "without a respools lease. Run it unscheduled, or on ZenML's databricks orchestrator"
            )
        run_id = str(placeholder_run.id) if placeholder_run is not None else snapshot.id.hex
        submission = PipelineSubmission(
            snapshot, stack, base_environment, step_environments, placeholder_run, f"respools-{run_id}"
        )
        step_name, step = demand
        return SubmissionResult(wait_for_completion=lambda: self.run_leased(submission, step_name, step))

    def pipeline_demand(self, snapshot: PipelineSnapshotResponse) -> tuple[str, StepDemand] | None:
        """The step whose demand the run's cluster must meet: the pooled step asking for the most GPUs."""
        demands = []
        for name, step in snapshot.step_configurations.items():
            settings = cast(RespoolsSettings, self.get_settings(step))
            demand = step_demand(step.config, settings)
            if demand is not None:
                demands.append((name, demand))
        return max(demands, key=lambda item: item[1].resources.get(GPU, 0), default=None)

    def run_leased(self, submission: PipelineSubmission, step_name: str, demand: StepDemand) -> None:
        """Hold the run's lease from the grant until its last job is terminal (module docstring)."""
        snapshot, placeholder = submission.snapshot, submission.placeholder_run
        identity = StepIdentity(
            orchestrator_run_id=submission.orchestrator_run_id,
            step_name=step_name,
            pipeline_name=snapshot.pipeline_configuration.name,
            run_name=placeholder.name if placeholder is not None else None,
            user=snapshot.user.name if snapshot.user else None,
            run_id=str(placeholder.id) if placeholder is not None else None,
            run_url=run_url(placeholder),
        )
        args = LeaseArgs.for_step(demand, identity)
        workspace = self._get_databricks_client()
        backend = DatabricksBackend(workspace_factory=lambda _settings: workspace)

        def runner_for(pool: PoolSpec) -> PipelineRunRunner:
            if pool.stack != DATABRICKS_STACK:
                raise BackendError(
                    f"pipeline {identity.pipeline_name!r} was granted a lease on pool {pool.name!r}, a "
                    f"{pool.stack!r} pool; the pooled Databricks orchestrator runs on databricks pools only: set "
                    "`pool` in its config or the pipeline's settings to a databricks pool"
                )
            return PipelineRunRunner(
                workspace,
                backend.launch_cluster,
                lambda launch, cluster: self.submit_attempt(submission, launch, cluster),
            )

        with self.config.respools_client() as client:
            outcome = JobRun(
                client,
                args.spec(),
                ["zenml", "pipeline", identity.pipeline_name],
                runner_for=runner_for,
                poll_s=self.config.respools_poll_s,
                timeout=demand.allocation_wait_timeout_s,
                progress=False,
                say=lambda text: log.info("respools: %s", text),
            ).run()
        if outcome.status.phase != JobPhase.SUCCEEDED:
            fail_unfinished_steps(submission)
            raise RuntimeError(
                f"Databricks run {outcome.status.job_id} of pipeline {identity.pipeline_name!r} ended "
                f"{outcome.status.provider_state} after {outcome.attempts} attempt(s)"
                + (f": {outcome.status.message}" if outcome.status.message else "")
            )

    def submit_attempt(self, submission: PipelineSubmission, launch: JobLaunch, cluster: compute.ClusterSpec) -> None:
        """ZenML's submission of the run's remaining steps, on the lease's job cluster."""
        snapshot = submission.snapshot
        if launch.attempt > 0:
            fail_unfinished_steps(submission)
            snapshot = without_steps(snapshot, succeeded_steps(submission))
        self._leased = LeasedCluster(cluster, launch, submission.orchestrator_run_id)
        try:
            DatabricksOrchestrator.submit_pipeline(
                self,
                snapshot,
                submission.stack,
                submission.base_environment,
                submission.step_environments,
                submission.placeholder_run,
            )
        finally:
            self._leased = None


def _run_steps(submission: PipelineSubmission) -> list[Any]:
    client = ZenClient()
    if submission.placeholder_run is not None:
        run_id = submission.placeholder_run.id
    else:
        runs = client.list_pipeline_runs(orchestrator_run_id=submission.orchestrator_run_id, size=1).items
        if not runs:
            return []
        run_id = runs[0].id
    return list(client.list_run_steps(pipeline_run_id=run_id, size=1000).items)


def succeeded_steps(submission: PipelineSubmission) -> set[str]:
    """Steps of the run that completed (or came from the cache) in an earlier attempt."""
    return {step.name for step in _run_steps(submission) if step.status.is_successful}


def fail_unfinished_steps(submission: PipelineSubmission) -> None:
    """A cancelled job's steps never report their end; failing them is what makes ZenML count a retry
    (a retriable failed step becomes *retrying*, and the next attempt's step run supersedes it)."""
    for step in _run_steps(submission):
        if not step.status.is_finished:
            publish_failed_step_run(step.id)


def without_steps(snapshot: PipelineSnapshotResponse, done: set[str]) -> PipelineSnapshotResponse:
    """A copy of the snapshot without ``done`` steps (nor dependencies on them), as ZenML prunes skipped
    steps of a replayed run; the remaining steps read the done steps' outputs from the run."""
    remaining = snapshot.model_copy(deep=True)
    steps = remaining.step_configurations
    for name in done:
        steps.pop(name, None)
    for step in steps.values():
        step.spec.upstream_steps[:] = [name for name in step.spec.upstream_steps if name not in done]
    return remaining

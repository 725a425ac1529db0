"""The pooled Kubernetes orchestrator: ZenML's Kubernetes orchestrator, with each pooled step's pod created
only once its respools lease is granted, and the lease realized in the pod.

What it uses of ZenML is public: the settings contract (a stack component's settings reach the code that
uses them through ``get_settings``, and ``KubernetesOrchestratorSettings.pod_settings`` shape a step's
pod), ``submit_pipeline``'s ``base_environment`` (the environment of the one container that starts all
steps) and placeholder run, and the step-run hooks. In the orchestrator pod, and only there, a step's
settings are the step's lease realized in its ``pod_settings`` by the Kubernetes backend (``nvidia.com/gpu``,
MIG or fractional resources, node pinning, tolerations, the lease label the backend's ``stop`` uses at a
preemption deadline), CPU and memory requests from the lease, and the lease's arguments in the pod's
environment; the first answer for a step waits for its grant. The step's pod then holds the lease exactly
as a step process of the pooled local orchestrator does (:mod:`respools_zenml.step_hooks`).

The answer does not depend on when or how often ZenML asks: it is a function of (run, step), computed
once (concurrent and later asks get the same settings and no second request), the run is the placeholder
run ``submit_pipeline`` was given (so a restarted orchestrator pod finds its requests again), and the
cache pre-check is correct before or after ZenML's own. What remains assumed is that ZenML reads a step's
settings to build the step's pod, off the thread that watches the others: true of ZenML 0.97 and 0.98,
and checked against each tested ZenML by ``tests/test_zenml_kubernetes_contract.py``. ``admission:
controller`` waits nowhere in ZenML's code at all.

Retries: a Job's retry pod would reuse the pod spec, and with it the devices of a lease that a preemption
gave to someone else, while the other step's pod waits for those very devices. So a pooled step's Job fails
as a whole when its container fails (``FailJob``), its request is never requeued (``max_retries=0``), and
a preempted step ends the step as failed; pod disruptions (node drain) are still ignored, and a
replacement pod re-attaches to the live lease. Rerun the pipeline to continue; the step resumes from its
checkpoint if it keeps one outside the run (see docs/zenml.md).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import Field
from zenml.client import Client as ZenClient
from zenml.config.base_settings import BaseSettings
from zenml.config.step_configurations import Step
from zenml.integrations.kubernetes.flavors.kubernetes_orchestrator_flavor import (
    KubernetesOrchestratorConfig,
    KubernetesOrchestratorSettings,
)
from zenml.integrations.kubernetes.orchestrators.kubernetes_orchestrator import KubernetesOrchestrator
from zenml.metadata.metadata_types import MetadataType

from respools import Client
from respools_zenml.caching import would_be_cached
from respools_zenml.identity import StepIdentity
from respools_zenml.kubernetes.controller_labels import asks_for_gpus, labelled_pod_settings
from respools_zenml.kubernetes.pod_settings import STEP_CONTAINER, realize_pod_settings
from respools_zenml.leasing import LeaseArgs
from respools_zenml.resolve import step_demand
from respools_zenml.settings import RespoolsConnection, RespoolsSettings
from respools_zenml.step_hooks import hold_for_step, in_step_process, release_for_step, step_metadata
from respools_zenml.waiting import claim, wait_for_grant

if TYPE_CHECKING:
    from zenml.config.step_run_info import StepRunInfo
    from zenml.models import PipelineRunResponse, PipelineSnapshotResponse
    from zenml.orchestrators import SubmissionResult
    from zenml.stack import Stack

log = logging.getLogger(__name__)

ORCHESTRATOR_POD_ENV = "RESPOOLS_ZENML_ORCHESTRATOR_POD"
"""Set in the orchestrator pod's environment only (to the pipeline's name): there, and only there, step
settings wait for leases."""

RUN_ENV = "RESPOOLS_ZENML_RUN_ID"
"""The placeholder run's id, in the orchestrator pod's environment beside :data:`ORCHESTRATOR_POD_ENV`:
the run a step's request serves (its idempotency key and labels) and whose cache a step is checked in.
Absent for a scheduled run, which gets its run only in the orchestrator pod."""

FAIL_JOB_ON_ERROR: dict[str, Any] = {
    "rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": STEP_CONTAINER, "operator": "NotIn", "values": [0]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
}
"""A pooled step's Job: no retry pod with a stale lease's devices; a disrupted pod is replaced."""


class PooledKubernetesOrchestratorSettings(KubernetesOrchestratorSettings, RespoolsSettings):
    """ZenML's Kubernetes orchestrator settings plus :class:`~respools_zenml.settings.RespoolsSettings`."""


class PooledKubernetesOrchestratorConfig(KubernetesOrchestratorConfig, RespoolsSettings, RespoolsConnection):
    """ZenML's Kubernetes orchestrator config plus where the respools server is."""

    admission: Literal["orchestrator", "controller"] = Field(
        default="orchestrator",
        description="orchestrator: the orchestrator pod takes each step's lease before creating its Job (no "
        "requeue: a preempted step fails); controller: the cluster runs `respools-kubernetes controller`, "
        "the step's Job is labelled for it, and a preempted step is suspended, requeued and retried",
    )


class PooledKubernetesOrchestrator(KubernetesOrchestrator):
    """Runs pipelines on Kubernetes, creating pooled steps' pods only under a granted lease."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._leased: dict[str, PooledKubernetesOrchestratorSettings] = {}
        self._leased_lock = threading.Lock()
        self._step_locks: dict[str, threading.Lock] = {}
        self._client: Client | None = None
        self._subject_name: str | None = None

    @property
    def config(self) -> PooledKubernetesOrchestratorConfig:
        return cast(PooledKubernetesOrchestratorConfig, self._config)

    @property
    def settings_class(self) -> type[BaseSettings]:
        return PooledKubernetesOrchestratorSettings

    @property
    def supports_dynamic_pipelines(self) -> bool:
        """Dynamic pipelines start steps outside ``get_settings``, where no lease would be taken."""
        return False

    @staticmethod
    def requires_resources_in_orchestration_environment(step: Step) -> bool:
        """Step resources are realized from the lease, so ZenML's "ignoring resources" warning is wrong here."""
        return False

    def submit_pipeline(
        self,
        snapshot: PipelineSnapshotResponse,
        stack: Stack,
        base_environment: dict[str, str],
        step_environments: dict[str, dict[str, str]],
        placeholder_run: PipelineRunResponse | None = None,
    ) -> SubmissionResult | None:
        """ZenML's submission, marking the orchestrator pod's environment (step pods do not inherit it)."""
        environment = {**base_environment, ORCHESTRATOR_POD_ENV: snapshot.pipeline_configuration.name}
        if placeholder_run is not None:
            environment[RUN_ENV] = str(placeholder_run.id)
        return super().submit_pipeline(snapshot, stack, environment, step_environments, placeholder_run)

    def get_settings(self, container: Any) -> BaseSettings:
        settings = super().get_settings(container)
        if not isinstance(container, Step) or not os.environ.get(ORCHESTRATOR_POD_ENV) or in_step_process():
            return settings
        pooled = cast(PooledKubernetesOrchestratorSettings, settings)
        if self.config.admission == "controller":
            return self.controller_settings(container, pooled)
        return self.leased_settings(container, pooled)

    def controller_settings(
        self, step: Step, settings: PooledKubernetesOrchestratorSettings
    ) -> PooledKubernetesOrchestratorSettings:
        """The step's settings labelled for the respools controller (see
        :mod:`respools_zenml.kubernetes.controller_labels`): nothing waits here, the controller holds the
        Job, and ZenML's own retry policy is left as the user set it (a Job suspended by the controller
        counts no failure)."""
        demand = step_demand(step.config, settings)
        if demand is None or not asks_for_gpus(demand.resources):
            return settings
        pod_settings = labelled_pod_settings(demand, settings.pod_settings, subject=self._subject())
        return settings.model_copy(update={"pod_settings": pod_settings})

    def _subject(self) -> str | None:
        """The subject of the orchestrator's token: the controller submits for it (its own token is admin)."""
        if self._subject_name is None:
            subject = self._respools().whoami().get("subject")
            self._subject_name = str(subject) if subject else ""
        return self._subject_name or None

    def leased_settings(
        self, step: Step, settings: PooledKubernetesOrchestratorSettings
    ) -> PooledKubernetesOrchestratorSettings:
        """The step's settings with its lease realized. The first ask for a step waits for the grant; every
        other ask, at the same time or later, gets the same answer and submits nothing."""
        name = step.spec.invocation_id
        with self._leased_lock:
            step_lock = self._step_locks.setdefault(name, threading.Lock())
        with step_lock:
            answer = self._leased.get(name)
            if answer is None:
                answer = self._lease_into(step, settings)
                self._leased[name] = answer
        return answer

    def _lease_into(
        self, step: Step, settings: PooledKubernetesOrchestratorSettings
    ) -> PooledKubernetesOrchestratorSettings:
        name = step.spec.invocation_id
        demand = step_demand(step.config, settings)
        run_id = os.environ.get(RUN_ENV)
        if demand is None or (run_id is not None and _served_from_cache(run_id, name)):
            return settings
        identity = StepIdentity(
            orchestrator_run_id=run_id or self.get_orchestrator_run_id(),
            step_name=name,
            pipeline_name=os.environ.get(ORCHESTRATOR_POD_ENV) or "unknown",
            run_id=run_id,
        )
        client = self._respools()
        args, request = claim(client, LeaseArgs.for_step(demand, identity, max_retries=0), identity)
        request = wait_for_grant(client, request, name, args.allocation_wait_timeout_s)
        assert request.lease_id is not None
        lease = client.get_lease(request.lease_id)
        pool = client.get_pool(lease.pool)
        pod_settings = realize_pod_settings(lease, pool, settings.pod_settings, env=args.to_env())
        return settings.model_copy(
            update={
                "pod_settings": pod_settings,
                "pod_failure_policy": settings.pod_failure_policy or FAIL_JOB_ON_ERROR,
            }
        )

    def _respools(self) -> Client:
        if self._client is None:
            self._client = self.config.respools_client()
        return self._client

    # -- inside the step's pod ----------------------------------------------------------------------

    def prepare_step_run(self, info: StepRunInfo) -> None:
        hold_for_step(info, self.config)

    def get_step_run_metadata(self, info: StepRunInfo) -> dict[str, MetadataType]:
        return step_metadata()

    def cleanup_step_run(self, info: StepRunInfo, step_failed: bool) -> None:
        release_for_step(step_failed)


def _served_from_cache(run_id: str, step_name: str) -> bool:
    """Whether ZenML will serve the step from its cache in this run, asked before the step queues for a
    lease no pod would use. Order-free: if ZenML checks its cache first, a cached step's settings are
    never used, and asking again changes nothing."""
    try:
        run = ZenClient().get_pipeline_run(run_id)
    except Exception as exc:  # an optimization only (see respools_zenml.caching)
        log.debug("respools: cannot find run %s to check the cache for step %s: %s", run_id, step_name, exc)
        return False
    return run.snapshot is not None and would_be_cached(run.snapshot, run, step_name)

"""The pooled Kubernetes orchestrator: ZenML's Kubernetes orchestrator, with each pooled step's pod created
only once its respools lease is granted, and the lease realized in the pod.

ZenML's orchestrator pod asks the orchestrator for a step's settings right before it builds the step's
Job (``get_settings`` in its node start-up thread). In the orchestrator pod this orchestrator answers only
once the step's request is granted, with the lease merged into the step's ``pod_settings`` by the
Kubernetes backend (``nvidia.com/gpu``, MIG or fractional resources, node pinning, tolerations, the lease
label the backend's ``stop`` uses at a preemption deadline), CPU and memory requests from the lease, and
the lease's arguments in the pod's environment. The step's pod then holds the lease exactly as a step
process of the pooled local orchestrator does (:mod:`respools_zenml.step_hooks`).

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
import socket
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
        self._client: Client | None = None

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
        subject = self._respools().whoami().get("subject")
        return str(subject) if subject else None

    def leased_settings(
        self, step: Step, settings: PooledKubernetesOrchestratorSettings
    ) -> PooledKubernetesOrchestratorSettings:
        """The step's settings with its lease realized: waits for the grant the first time it is asked for
        a step, then answers the same settings (ZenML asks again while it monitors the step's Job)."""
        name = step.spec.invocation_id
        with self._leased_lock:
            cached = self._leased.get(name)
        if cached is not None:
            return cached
        demand = step_demand(step.config, settings)
        if demand is None or _served_from_cache(name):
            return settings
        identity = StepIdentity(
            orchestrator_run_id=self.get_orchestrator_run_id(),
            step_name=name,
            pipeline_name=os.environ.get(ORCHESTRATOR_POD_ENV) or "unknown",
        )
        client = self._respools()
        args, request = claim(client, LeaseArgs.for_step(demand, identity, max_retries=0), identity)
        request = wait_for_grant(client, request, name, args.allocation_wait_timeout_s)
        assert request.lease_id is not None
        lease = client.get_lease(request.lease_id)
        pool = client.get_pool(lease.pool)
        pod_settings = realize_pod_settings(lease, pool, settings.pod_settings, env=args.to_env())
        leased = settings.model_copy(
            update={
                "pod_settings": pod_settings,
                "pod_failure_policy": settings.pod_failure_policy or FAIL_JOB_ON_ERROR,
            }
        )
        with self._leased_lock:
            self._leased[name] = leased
        return leased

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


def _served_from_cache(step_name: str) -> bool:
    """ZenML's orchestrator pod checks the cache right after asking for the settings; ask first, so a cached
    step does not queue for a lease no pod would use. A fresh run's orchestrator run id is the pod's name."""
    try:
        runs = ZenClient().list_pipeline_runs(orchestrator_run_id=socket.gethostname(), size=1).items
        run = ZenClient().get_pipeline_run(runs[0].id) if runs else None
    except Exception as exc:  # an optimization only (see respools_zenml.caching)
        log.debug("respools: cannot find the run to check the cache for step %s: %s", step_name, exc)
        return False
    return run is not None and run.snapshot is not None and would_be_cached(run.snapshot, run, step_name)

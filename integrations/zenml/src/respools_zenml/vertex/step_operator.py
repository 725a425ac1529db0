"""The pooled Vertex step operator: ZenML's :class:`VertexStepOperator`, whose steps hold a respools lease.

ZenML's operator builds and submits the custom job as it always does (image, entrypoint, disks, network,
service account); the lease decides the machine. While a step's job is submitted, the operator's settings
read ``machine_type``, ``accelerator_type`` and ``accelerator_count`` from the lease's realization on its
``vertex`` pool (:meth:`respools_vertex.VertexBackend.realize`, the same shape ``respools run`` submits),
and the job is stamped with the rest of it on its way out (Spot scheduling where the pool says, the
``respools-lease-id``… labels by which the service's ``stop`` finds and cancels it). Preemption, release and
ZenML's retry are the pooled step operator's (:mod:`respools_zenml.step_operator`).

``api_endpoint`` points the operator at another Vertex endpoint; an ``http://`` one is a local emulator
(the tests' fake): it is called without Google credentials, its jobs run on this machine, and so the stack
needs neither a remote ZenML server nor a remote artifact store or container registry.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, cast

from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import aiplatform_v1
from pydantic import Field
from respools_vertex.runner import label_value
from respools_vertex.spec import apply_to_custom_job
from zenml.enums import ExecutionStatus
from zenml.integrations.gcp.constants import VERTEX_ENDPOINT_SUFFIX
from zenml.integrations.gcp.flavors.vertex_step_operator_flavor import (
    VertexStepOperatorConfig,
    VertexStepOperatorSettings,
)
from zenml.integrations.gcp.step_operators.vertex_step_operator import VertexStepOperator
from zenml.stack import StackValidator

from respools.backends import BackendError, get_backend
from respools_zenml.settings import RespoolsSettings
from respools_zenml.step_operator.base import PooledStepOperatorBase, PooledStepOperatorOptions
from respools_zenml.step_operator.requester import HeldStep

if TYPE_CHECKING:
    from zenml.config.base_settings import BaseSettings
    from zenml.config.step_run_info import StepRunInfo
    from zenml.models import StepRunResponse

VERTEX_STACK = "vertex"


class PooledVertexStepOperatorSettings(VertexStepOperatorSettings, RespoolsSettings):
    """ZenML's Vertex settings plus how the step asks respools for capacity. ``machine_type``,
    ``accelerator_type`` and ``accelerator_count`` are the lease's while the step holds one."""


class PooledVertexStepOperatorConfig(VertexStepOperatorConfig, PooledStepOperatorOptions):
    """ZenML's Vertex step operator config plus the respools connection and stack-wide defaults."""

    api_endpoint: str | None = Field(
        default=None,
        description="Vertex AI API endpoint; default: {region}-aiplatform.googleapis.com. An http:// endpoint "
        "is a local emulator: called without credentials, its jobs run on this machine",
    )

    @property
    def emulated(self) -> bool:
        return bool(self.api_endpoint and self.api_endpoint.startswith("http://"))

    @property
    def is_remote(self) -> bool:
        return not self.emulated


class _Stamp(threading.local):
    """The realization of the lease whose job the current thread is submitting, if any."""

    fragment: dict[str, Any] | None = None
    labels: dict[str, str] | None = None


class LeaseStampedJobServiceClient(aiplatform_v1.JobServiceClient):
    """Vertex's job client; a custom job created while a lease is being submitted gets the lease's part
    (machine spec, Spot, labels) merged in with :func:`respools_vertex.apply_to_custom_job`."""

    stamp: _Stamp

    def create_custom_job(self, request: Any = None, *, custom_job: Any = None, **kwargs: Any) -> Any:
        fragment, labels = self.stamp.fragment, self.stamp.labels
        if fragment is not None and custom_job is not None:
            job = apply_to_custom_job(aiplatform_v1.CustomJob(custom_job), fragment)
            for key, value in (labels or {}).items():
                job.labels[key] = value
            custom_job = job
        return super().create_custom_job(request, custom_job=custom_job, **kwargs)


class PooledVertexStepOperator(PooledStepOperatorBase, VertexStepOperator):
    """Runs steps as Vertex AI custom jobs on the machines of their respools leases."""

    _stamp: _Stamp | None = None
    _stamped_client: LeaseStampedJobServiceClient | None = None

    @property
    def config(self) -> PooledVertexStepOperatorConfig:
        return cast(PooledVertexStepOperatorConfig, self._config)

    @property
    def settings_class(self) -> type[BaseSettings] | None:
        return PooledVertexStepOperatorSettings

    @property
    def stamp(self) -> _Stamp:
        if self._stamp is None:
            self._stamp = _Stamp()
        return self._stamp

    @property
    def validator(self) -> StackValidator | None:
        """ZenML's checks (remote artifact store, container registry, image builder), except against a
        local emulator, whose jobs run on this machine."""
        return StackValidator() if self.config.emulated else super().validator

    def _get_authentication(self) -> tuple[Credentials, str]:
        """The one private ZenML method overridden (ZenML's GCP mixin has no public way to give anonymous
        credentials): only against a local emulator endpoint; against Vertex itself ZenML's own runs."""
        if self.config.emulated:
            if not self.config.project:
                raise ValueError("a pooled Vertex step operator on an emulator endpoint needs `project` set")
            return AnonymousCredentials(), self.config.project  # type: ignore[no-untyped-call]
        return super()._get_authentication()

    def get_job_service_client(self) -> aiplatform_v1.JobServiceClient:
        """ZenML's verbs get their job client here: ours, kept in our own attribute (not ZenML's private one)."""
        if self.connector_has_expired():
            self._stamped_client = None
        if self._stamped_client is None:
            credentials, _ = self._get_authentication()
            endpoint = self.config.api_endpoint or self.config.region + VERTEX_ENDPOINT_SUFFIX
            client = LeaseStampedJobServiceClient(
                credentials=credentials,
                client_options={"api_endpoint": endpoint},
                transport="rest" if self.config.emulated else None,
            )
            client.stamp = self.stamp
            self._stamped_client = client
        return self._stamped_client

    def get_settings(self, container: Any) -> BaseSettings:
        """The step's settings; while a lease's job is being submitted, its machine is the lease's."""
        settings = super().get_settings(container)
        fragment = self.stamp.fragment
        if fragment is None:
            return settings
        machine = fragment["job_spec"]["worker_pool_specs"][0]["machine_spec"]
        return settings.model_copy(
            update={
                "machine_type": machine["machine_type"],
                "accelerator_type": machine["accelerator_type"],
                "accelerator_count": machine["accelerator_count"],
            }
        )

    # -- the wrapped operator's verbs --------------------------------------------------------------

    def launch_job(
        self, info: StepRunInfo, entrypoint_command: list[str], environment: dict[str, str], held: HeldStep | None
    ) -> None:
        if held is None:
            VertexStepOperator.submit(self, info, entrypoint_command, environment)
            return
        self.stamp.fragment, self.stamp.labels = lease_job_fragment(held), lease_labels(held)
        try:
            VertexStepOperator.submit(self, info, entrypoint_command, environment)
        finally:
            self.stamp.fragment = self.stamp.labels = None

    def job_status(self, step_run: StepRunResponse) -> ExecutionStatus:
        return VertexStepOperator.get_status(self, step_run)

    def cancel_job(self, step_run: StepRunResponse) -> None:
        VertexStepOperator.cancel(self, step_run)

    def cleanup_job(self, step_run: StepRunResponse) -> None:
        VertexStepOperator.cleanup_step_submission(self, step_run)


def lease_job_fragment(held: HeldStep) -> dict[str, Any]:
    """The lease's part of the custom job, as the ``vertex`` backend realizes it."""
    if held.lease.stack != VERTEX_STACK:
        raise BackendError(
            f"step {held.step_name!r} was granted lease {held.lease.id} on pool {held.lease.pool!r}, a "
            f"{held.lease.stack!r} pool; the pooled Vertex step operator runs steps on vertex pools only: "
            "set `pool` in its config or the step's settings to a vertex pool"
        )
    fragment: dict[str, Any] = get_backend(VERTEX_STACK).realize(held.lease, held.pool).native["custom_job"]
    return fragment


def lease_labels(held: HeldStep) -> dict[str, str]:
    """The labels ``respools run`` puts on its jobs too (lease, request, subject, attempt)."""
    lease = held.lease
    labels = {
        "respools-lease-id": lease.id,
        "respools-request-id": lease.request_id,
        "respools-subject": lease.subject,
        "respools-attempt": str(lease.attempt),
    }
    return {key: label_value(value) for key, value in labels.items()}

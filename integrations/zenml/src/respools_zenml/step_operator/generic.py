"""The generic pooled step operator: any registered step operator becomes a respools requester.

Register the operator that runs the jobs as usual (say ``sagemaker``, ``azureml``, ``kubernetes``), then a
``respools_step_operator`` component naming it::

    zenml step-operator register gpu-pool --flavor=respools_step_operator \\
        --step_operator=sagemaker-ops --respools_url=https://respools.example.com --pool=sagemaker-a10g

and put ``gpu-pool`` in the stack. A step run through it waits for its lease in the orchestrator's process
before the wrapped operator launches anything, holds the lease while the job runs, has the job cancelled
at the preemption deadline (ZenML then retries it) and releases the lease once the job is finished. The
wrapped operator is built from its stored component under the pooled operator's name, so the steps'
settings (``settings={"step_operator": ...}``) and Docker builds reach it as if the steps named it. It
chooses its machine from its own settings: only operators respools knows (the pooled Vertex one) set the
machine from the lease.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from pydantic import Field
from zenml.client import Client as ZenClient
from zenml.enums import ExecutionStatus, StackComponentType
from zenml.stack import Flavor, StackValidator
from zenml.step_operators import BaseStepOperator, BaseStepOperatorConfig, BaseStepOperatorFlavor
from zenml.step_operators.step_operator_entrypoint_configuration import StepOperatorEntrypointConfiguration

from respools_zenml.settings import RespoolsSettings
from respools_zenml.step_operator.base import PooledStepOperatorBase, PooledStepOperatorOptions
from respools_zenml.step_operator.requester import HeldStep

if TYPE_CHECKING:
    from zenml.config.base_settings import BaseSettings
    from zenml.config.build_configuration import BuildConfiguration
    from zenml.config.step_run_info import StepRunInfo
    from zenml.models import PipelineSnapshotBase, StepRunResponse

FLAVOR_NAME = "respools_step_operator"


class PooledStepOperatorConfig(BaseStepOperatorConfig, PooledStepOperatorOptions):
    """Which registered step operator runs the jobs, plus the respools connection and defaults."""

    step_operator: str = Field(
        min_length=1, max_length=255, description="name of the registered step operator that runs the jobs"
    )

    @property
    def is_remote(self) -> bool:
        """The wrapped operator's answer (ZenML asks it to decide whether the stack needs a ZenML server)."""
        try:
            model = ZenClient().get_stack_component(StackComponentType.STEP_OPERATOR, self.step_operator)
            return bool(Flavor.from_model(model.flavor).config_class(**model.configuration).is_remote)
        except Exception:  # not registered (yet): assume remote, ZenML's stricter reading
            return True


class PooledStepOperator(PooledStepOperatorBase):
    """Wraps the step operator named in its config (see the module docstring)."""

    _wrapped: BaseStepOperator | None = None

    @property
    def config(self) -> PooledStepOperatorConfig:
        return cast(PooledStepOperatorConfig, self._config)

    @property
    def settings_class(self) -> type[BaseSettings] | None:
        return RespoolsSettings

    @property
    def wrapped(self) -> BaseStepOperator:
        """The wrapped step operator, built from its stored component under this operator's name."""
        if self._wrapped is None:
            self._wrapped = wrapped_step_operator(self.config.step_operator, self.name)
        return self._wrapped

    @property
    def validator(self) -> StackValidator | None:
        return self.wrapped.validator

    @property
    def entrypoint_config_class(self) -> type[StepOperatorEntrypointConfiguration]:
        return self.wrapped.entrypoint_config_class

    def get_docker_builds(self, snapshot: PipelineSnapshotBase) -> list[BuildConfiguration]:
        return self.wrapped.get_docker_builds(snapshot)

    def launch_job(
        self, info: StepRunInfo, entrypoint_command: list[str], environment: dict[str, str], held: HeldStep | None
    ) -> None:
        self.wrapped.submit(info, entrypoint_command, environment)

    def job_status(self, step_run: StepRunResponse) -> ExecutionStatus:
        return self.wrapped.get_status(step_run)

    def cancel_job(self, step_run: StepRunResponse) -> None:
        self.wrapped.cancel(step_run)

    def cleanup_job(self, step_run: StepRunResponse) -> None:
        self.wrapped.cleanup_step_submission(step_run)


def wrapped_step_operator(component: str, name: str) -> BaseStepOperator:
    """The registered step operator ``component`` as a live object named ``name``."""
    model = ZenClient().get_stack_component(StackComponentType.STEP_OPERATOR, component)
    if model.flavor_name == FLAVOR_NAME:
        raise ValueError(f"step operator {component!r} is itself a pooled step operator; name the one it wraps")
    flavor = Flavor.from_model(model.flavor)
    operator = flavor.implementation_class(
        user=model.user_id,
        name=name,
        id=model.id,
        config=flavor.config_class(**model.configuration),
        environment=model.environment,
        secrets=model.secrets,
        labels=model.labels,
        flavor=model.flavor_name,
        type=model.type,
        created=model.created,
        updated=model.updated,
        connector_requirements=flavor.service_connector_requirements,
        connector=model.connector.id if model.connector else None,
        connector_resource_id=model.connector_resource_id,
    )
    return cast(BaseStepOperator, operator)


class PooledStepOperatorFlavor(BaseStepOperatorFlavor):
    """Any step operator, with a respools lease around each step's job."""

    @property
    def name(self) -> str:
        return FLAVOR_NAME

    @property
    def docs_url(self) -> str | None:
        return None

    @property
    def sdk_docs_url(self) -> str | None:
        return None

    @property
    def logo_url(self) -> str:
        return "https://public-flavor-logos.s3.eu-central-1.amazonaws.com/step_operator/step_operator.png"

    @property
    def config_class(self) -> type[BaseStepOperatorConfig]:
        return PooledStepOperatorConfig

    @property
    def implementation_class(self) -> type[PooledStepOperator]:
        return PooledStepOperator

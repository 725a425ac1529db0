"""What every pooled step operator does around the job of the operator it wraps (see :mod:`.requester`).

A subclass says how to launch, look at, cancel and clean up the job (:meth:`PooledStepOperatorBase.launch_job`
and friends: the wrapped operator's own ``submit``, ``get_status``, ``cancel`` and
``cleanup_step_submission``), and may adapt the job to the lease in ``launch_job`` (the Vertex one sets the
machine). The lease's identity reaches the job's environment (``RESPOOLS_URL``, ``RESPOOLS_LEASE_ID``,
``RESPOOLS_REQUEST_ID``, ``RESPOOLS_ATTEMPT``, and ``RESPOOLS_TOKEN``, a credential good for that lease only,
where the server issues one), so the respools SDK inside the job can hear notice and checkpoint.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from typing import TYPE_CHECKING, cast

from pydantic import Field
from zenml.client import Client as ZenClient
from zenml.enums import ExecutionStatus
from zenml.step_operators import BaseStepOperator

from respools.client.environment import lease_env
from respools.client.jobs import URL_ENV, scoped_token_env
from respools_zenml.settings import RespoolsConnection, RespoolsSettings
from respools_zenml.step_operator.requester import HeldStep, StepRequester

if TYPE_CHECKING:
    from zenml.config.step_run_info import StepRunInfo
    from zenml.models import StepRunResponse

log = logging.getLogger(__name__)

POLL_S = 5.0


class PooledStepOperatorOptions(RespoolsSettings, RespoolsConnection):
    """The config fields every pooled step operator adds to the wrapped one's."""

    respools_poll_s: float = Field(
        default=POLL_S,
        gt=0,
        le=300,
        description="seconds between looks at a running job (and its lease's preemption deadline)",
    )


class PooledStepOperatorBase(BaseStepOperator):
    """A step operator whose steps hold a respools lease while their job runs."""

    _requester: StepRequester | None = None

    @property
    def requester(self) -> StepRequester:
        if self._requester is None:
            self._requester = StepRequester()
        return self._requester

    @property
    def pooled_options(self) -> PooledStepOperatorOptions:
        return cast(PooledStepOperatorOptions, self._config)

    # -- the wrapped operator's verbs --------------------------------------------------------------

    @abstractmethod
    def launch_job(
        self, info: StepRunInfo, entrypoint_command: list[str], environment: dict[str, str], held: HeldStep | None
    ) -> None:
        """Start the step's job (``held`` is its lease, ``None`` for a step that asks for nothing)."""

    @abstractmethod
    def job_status(self, step_run: StepRunResponse) -> ExecutionStatus: ...

    @abstractmethod
    def cancel_job(self, step_run: StepRunResponse) -> None: ...

    @abstractmethod
    def cleanup_job(self, step_run: StepRunResponse) -> None: ...

    # -- ZenML's step operator interface -----------------------------------------------------------

    def submit(self, info: StepRunInfo, entrypoint_command: list[str], environment: dict[str, str]) -> None:
        settings = cast(RespoolsSettings, self.get_settings(info))
        held = self.requester.acquire(info, settings, self.pooled_options)
        if held is not None:
            environment = {**environment, **job_env(held)}
            log.info(
                "Step %s holds lease %s on pool %s (attempt %d); launching its job through %s.",
                held.step_name,
                held.lease.id,
                held.lease.pool,
                held.lease.attempt,
                self.name,
            )
        try:
            self.launch_job(info, entrypoint_command, environment, held)
        except BaseException:
            self.requester.forget(info.step_run_id)  # nothing runs on the lease: give it back
            raise

    def get_status(self, step_run: StepRunResponse) -> ExecutionStatus:
        held = self.requester.get(step_run.id)
        if held is not None and held.cancelled is None:
            why = held.cancel_due()
            if why is not None:
                log.warning("Step %s: %s; cancelling its job.", held.step_name, why)
                self.cancel_job(step_run)
                held.cancelled = why
        return self.requester.observed(step_run.id, self.job_status(step_run))

    def wait(self, step_run: StepRunResponse) -> ExecutionStatus:
        """ZenML's wait, on a steady clock: the preemption deadline is enforced at each look, so the looks
        cannot back off to ZenML's 16 s."""
        while True:
            try:
                status = self.get_status(step_run)
            except Exception as exc:  # as ZenML's wait: a failed look falls back to the recorded status
                log.error("Failed to get status of step run `%s`: %s", step_run.id, exc)
                status = ZenClient().get_run_step(step_run.id, hydrate=False).status
            if status.is_finished or status == ExecutionStatus.RETRYING:
                return status
            time.sleep(self.pooled_options.respools_poll_s)

    def cancel(self, step_run: StepRunResponse) -> None:
        """Cancel the job; its lease is released once the job is finished (or at clean-up)."""
        self.cancel_job(step_run)

    def cleanup_step_submission(self, step_run: StepRunResponse) -> None:
        try:
            self.cleanup_job(step_run)
        finally:
            self.requester.forget(step_run.id)


def job_env(held: HeldStep) -> dict[str, str]:
    """What the job learns about its lease, with a token good for that lease only."""
    return {URL_ENV: held.client.url, **lease_env(held.lease), **scoped_token_env(held.client, held.lease.id)}

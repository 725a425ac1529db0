"""A step operator's side of a lease: take it before the wrapped operator launches the step's job, hold it
while the job runs, cancel the job at the preemption deadline, give it back once the job is terminal.

ZenML's step launcher drives a step operator through ``submit`` (start the job, return at once),
``get_status`` (polled until the status is finished), ``cancel`` and ``cleanup_step_submission``. The
requester hooks into those verbs, one :class:`HeldStep` per step run:

- ``submit``: the step's request is submitted (or found again under its idempotency key, at its queue
  position after a preemption) and waited for in the orchestrator's process, so a queued step costs no
  job; once granted the lease is activated and heartbeated from a thread here while the job runs.
- ``get_status``: past the preemption deadline (or once the lease was lost) the job is cancelled through
  the wrapped operator; its cancelled end then reads as *failed*, which is what makes ZenML retry the step
  (a stopped step is never retried), and the retry finds the requeued request under the same key.
- the lease is released only once the wrapped operator reports the job finished, never while the job may
  still hold machines.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from uuid import UUID

from zenml.enums import ExecutionStatus

from respools import Client
from respools.client.holding import Holding
from respools.model import Lease, PoolSpec
from respools_zenml.identity import StepIdentity
from respools_zenml.leasing import LeaseArgs
from respools_zenml.resolve import step_demand
from respools_zenml.settings import RespoolsConnection, RespoolsSettings
from respools_zenml.waiting import LeaseRefused, claim, wait_for_grant, withdraw

if TYPE_CHECKING:
    from zenml.config.step_run_info import StepRunInfo

log = logging.getLogger(__name__)


@dataclass
class HeldStep:
    """One step run's granted lease while its job runs."""

    client: Client
    holding: Holding
    lease: Lease
    pool: PoolSpec
    step_name: str
    cancelled: str | None = None
    """Why the requester cancelled the job (the deadline passed, the lease ended), once it did."""
    released: bool = field(default=False)

    def cancel_due(self) -> str | None:
        """Why the job must be cancelled now, if it must."""
        if self.holding.lost is not None:
            return f"lease {self.lease.id} ended while its job ran"
        if self.holding.notice is None:
            return None
        lease = self.holding.lease or self.lease
        deadline = lease.preempt_deadline
        if deadline is None or datetime.now(UTC) >= deadline:
            return (
                f"lease {lease.id} was preempted ({lease.preempt_reason or 'no reason given'}) and its deadline passed"
            )
        return None

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        try:
            self.holding.release()
        finally:
            self.client.close()


class StepRequester:
    """The leases of the step runs one step operator has submitted (a dynamic pipeline submits several at
    once, from threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[UUID, HeldStep] = {}

    def acquire(self, info: StepRunInfo, settings: RespoolsSettings, connection: RespoolsConnection) -> HeldStep | None:
        """Wait for the step's lease and start holding it; ``None`` for a step that asks for nothing (it is
        launched as the wrapped operator would launch it)."""
        demand = step_demand(info.config, settings)
        if demand is None:
            return None
        identity = StepIdentity(
            orchestrator_run_id=str(info.run_id),
            step_name=info.pipeline_step_name,
            pipeline_name=info.pipeline.name,
            run_name=info.run_name,
        )
        client = connection.respools_client()
        try:
            args, request = claim(client, LeaseArgs.for_step(demand, identity), identity)
            try:
                request = wait_for_grant(client, request, identity.step_name)
            except LeaseRefused:
                raise
            except BaseException:
                withdraw(client, request)  # interrupted while queued: leave the queue
                raise
            holding = Holding(client, request, on_notice=_ignore, on_lost=_ignore)
            lease = holding.activate()
        except BaseException:
            client.close()
            raise
        assert holding.pool is not None
        held = HeldStep(client=client, holding=holding, lease=lease, pool=holding.pool, step_name=args.step_name)
        with self._lock:
            self._held[info.step_run_id] = held
        return held

    def get(self, step_run_id: UUID) -> HeldStep | None:
        with self._lock:
            return self._held.get(step_run_id)

    def forget(self, step_run_id: UUID) -> None:
        """Release the step run's lease (if still held) and drop it."""
        with self._lock:
            held = self._held.pop(step_run_id, None)
        if held is not None:
            held.release()

    def observed(self, step_run_id: UUID, status: ExecutionStatus) -> ExecutionStatus:
        """The status ZenML should see: a job the requester cancelled failed (so ZenML retries it); the
        lease is released once the job is finished."""
        held = self.get(step_run_id)
        if held is None or not status.is_finished:
            return status
        self.forget(step_run_id)
        if held.cancelled is not None and status != ExecutionStatus.COMPLETED:
            log.warning("Step %s: its job was cancelled (%s); it counts as failed.", held.step_name, held.cancelled)
            return ExecutionStatus.FAILED
        return status


def _ignore(news: object) -> None:
    """``get_status`` reads the holding's ``notice`` and ``lost`` itself, on ZenML's polling clock."""

"""The arguments of a step's lease, carried from the orchestrator to the step's process or pod.

The orchestrator waits for the grant before it starts the step; the step's process then holds the same
lease (heartbeats, ``LeasePreempted`` in the step's thread, release at the end) by entering
``respools.lease(...)`` with the same arguments and idempotency key. Both sides therefore build their
request from one :class:`LeaseArgs`, passed to the step as JSON in :data:`LEASE_ENV`: the server replays a
key only for an identical request, and the identical request is what makes the step find its lease.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from respools import Client, Hooks, LeaseSession
from respools.model import RequestSpec
from respools_zenml.demand import StepDemand
from respools_zenml.identity import StepIdentity

LEASE_ENV = "RESPOOLS_ZENML_LEASE"
"""JSON :class:`LeaseArgs` for the step process; set only in the environment of pooled steps."""


class LeaseArgs(BaseModel):
    """Everything ``respools.lease(...)`` needs to rebuild one step's request exactly."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step_name: str
    resources: dict[str, float]
    preemptible: bool
    priority: int
    max_retries: int = Field(ge=0)
    pools: list[str] | None
    gpu_class: str | None
    selectors: dict[str, str]
    labels: dict[str, str]
    idempotency_key: str
    stop_at_notice: bool = False
    """Not part of the request: how the orchestrator treats a notice (``reclaim_tolerance='any'``)."""
    allocation_wait_timeout_s: float | None = None
    initialization_lease_s: float | None = None

    @classmethod
    def for_step(cls, demand: StepDemand, identity: StepIdentity, *, max_retries: int | None = None) -> LeaseArgs:
        """The first generation's arguments, labelled with the host the orchestrator runs on."""
        labels = {"host": socket.gethostname(), **demand.labels, **identity.labels()}
        return cls(
            step_name=identity.step_name,
            resources=demand.resources,
            preemptible=demand.preemptible,
            priority=demand.priority,
            max_retries=demand.max_retries if max_retries is None else max_retries,
            pools=demand.pools,
            gpu_class=demand.gpu_class,
            selectors=demand.selectors,
            labels=labels,
            idempotency_key=identity.request_key(),
            stop_at_notice=demand.stop_at_notice,
            allocation_wait_timeout_s=demand.allocation_wait_timeout_s,
            initialization_lease_s=demand.initialization_lease_s,
        )

    def with_key(self, key: str) -> LeaseArgs:
        return self.model_copy(update={"idempotency_key": key})

    def spec(self) -> RequestSpec:
        """The request, identical wherever it is built (the server replays a key only for the same spec)."""
        return RequestSpec(
            resources=self.resources,
            preemptible=self.preemptible,
            priority=self.priority,
            max_retries=self.max_retries,
            pools=self.pools,
            gpu_class=self.gpu_class,
            selectors=self.selectors,
            labels=self.labels,
            idempotency_key=self.idempotency_key,
        )

    def session(self, client: Client, hooks: Hooks[LeaseSession] | None = None) -> LeaseSession:
        """The lease session to hold in the step (``with`` it); no progress line, steps log instead."""
        return LeaseSession(self.spec(), client=client, hooks=hooks, progress=False)

    def to_env(self) -> dict[str, str]:
        return {LEASE_ENV: self.model_dump_json()}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LeaseArgs | None:
        raw = (os.environ if environ is None else environ).get(LEASE_ENV)
        return cls.model_validate_json(raw) if raw else None

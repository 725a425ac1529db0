"""The contract for stacks that run a lease's work as a job of their own (Vertex AI custom jobs,
Databricks runs) rather than in the holder's process.

Such a stack answers :meth:`respools.backends.Backend.job_runner` with a :class:`JobRunner`: four verbs
over the provider's job API (submit, find, status, cancel), each stack-specific. The life around them —
wait for the grant, submit, heartbeat while the job is queued or running, cancel at the preemption
deadline, release once the job is terminal, resubmit on the next grant — is stack-independent and lives
once, in :mod:`respools.client.jobs`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from respools.model import Lease, PoolSpec


class JobPhase(StrEnum):
    """A provider's job states, reduced to what the lease's life depends on."""

    QUEUED = "queued"
    """Accepted by the provider, not running yet (its own queue, machine provisioning): held time."""
    RUNNING = "running"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED})


class JobError(RuntimeError):
    """The provider refused a call for good (bad credentials, an invalid job, retries used up); the
    message carries the provider's own words."""


@dataclass(frozen=True)
class JobStatus:
    """One look at a job: our phase, the provider's state name and the provider's own message."""

    job_id: str
    phase: JobPhase
    provider_state: str
    message: str = ""


@dataclass(frozen=True)
class JobLaunch:
    """What to run for one attempt of a lease: the image and command, and the environment the job gets
    (``RESPOOLS_URL``, ``RESPOOLS_LEASE_ID``, ``RESPOOLS_ATTEMPT``…). The labels a runner puts on the job
    (lease, request, subject, attempt) come from the lease, so a restarted runner finds the job again."""

    lease: Lease
    pool: PoolSpec
    command: Sequence[str]
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def attempt(self) -> int:
        return self.lease.attempt

    def labels(self) -> dict[str, str]:
        """The identifying labels, before each provider's own spelling rules."""
        return {
            "respools-lease-id": self.lease.id,
            "respools-request-id": self.lease.request_id,
            "respools-subject": self.lease.subject,
            "respools-attempt": str(self.lease.attempt),
        }


class JobRunner(ABC):
    """One pool's job API. Implementations retry the provider's transient errors (429, 5xx) themselves
    and raise :class:`JobError` for the rest."""

    @abstractmethod
    def submit(self, launch: JobLaunch) -> JobStatus:
        """Create the job for this attempt of the lease."""

    @abstractmethod
    def find(self, launch: JobLaunch) -> JobStatus | None:
        """The job an earlier runner submitted for this lease and attempt (found by its labels), if any."""

    @abstractmethod
    def status(self, job_id: str) -> JobStatus:
        """The job's state now."""

    @abstractmethod
    def cancel(self, job_id: str) -> None:
        """Ask the provider to stop the job; it reaches a terminal phase later."""


def provider_retrying(
    transient: tuple[type[BaseException], ...], *, attempts: int, backoff_s: float, max_backoff_s: float
) -> Retrying:
    """How a runner calls its provider: errors the provider means as "try again" (429, 5xx, a dropped
    connection) are retried with exponential backoff, anything else is raised at once, and so is the
    last transient one."""
    return Retrying(
        retry=retry_if_exception_type(transient),
        wait=wait_exponential(multiplier=backoff_s, max=max_backoff_s),
        stop=stop_after_attempt(attempts),
        reraise=True,
    )

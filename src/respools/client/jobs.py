"""``respools run --pool <vertex or databricks pool>``'s engine: a lease's life is a provider job's life.

One loop for every stack whose work runs as a job of its own (see :mod:`respools.backends.jobs`):
wait for the grant, submit the job (or find the one a previous runner submitted for this lease and
attempt), heartbeat the lease while the job is queued or running — the provider's own queueing is held
time — and release the lease once the job is terminal, with its outcome and the provider's message.

On preemption notice the job keeps running through the grace period (the respools SDK inside it hears
the notice where the network allows, and checkpoints); at the deadline the runner cancels it, and the
lease is released only once the provider reports the job terminal, so the capacity is never handed on
while the job may still hold machines. If the server requeued the request, the job is submitted again on
the next grant with the new attempt number.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from respools.backends import BackendError, get_backend
from respools.backends.jobs import JobError, JobLaunch, JobPhase, JobRunner, JobStatus
from respools.client.api import Client
from respools.client.config import TOKEN_ENV
from respools.client.environment import lease_env
from respools.client.errors import ApiError, LeaseLost
from respools.client.holding import Holding
from respools.client.queue import QueueEntry
from respools.client.retry import Backoff
from respools.model import PoolSpec, RequestSpec

log = logging.getLogger("respools.client")

URL_ENV = "RESPOOLS_URL"
POLL_S = 5.0
FAILED_STATUS = 1
CANCELLED_STATUS = 130

Say = Callable[[str], None]
RunnerFor = Callable[[PoolSpec], JobRunner]


def stack_runner(pool: PoolSpec) -> JobRunner:
    """The pool's stack runner, through the backend plugin (so the core never imports an integration)."""
    runner = get_backend(pool.stack).job_runner(pool)
    if runner is None:
        raise BackendError(
            f"pool {pool.name!r} is on stack {pool.stack!r}, which runs work in the holder's own process; "
            "run without --image there (respools run --pool POOL -- cmd)"
        )
    return runner


@dataclass(frozen=True)
class JobOutcome:
    """How the run ended: the last job's status and the exit status ``respools run`` returns."""

    status: JobStatus
    exit_status: int
    attempts: int


class JobRun:
    """Runs ``command`` (in ``image``) as provider jobs under a lease for ``spec`` until a job ends without
    a preemption that requeued the request."""

    def __init__(
        self,
        client: Client,
        spec: RequestSpec,
        command: Sequence[str],
        *,
        image: str | None = None,
        runner_for: RunnerFor = stack_runner,
        poll_s: float = POLL_S,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        progress: bool | None = None,
        say: Say | None = None,
    ) -> None:
        if not command:
            raise ValueError(
                "give the command to run after --, e.g. respools run --pool P --image I -- python train.py"
            )
        self.client = client
        self.command = list(command)
        self.image = image
        self.runner_for = runner_for
        self.poll_s = poll_s
        self.backoff = backoff or Backoff()
        self.say: Say = say or (lambda text: log.warning("%s", text))
        self.queue = QueueEntry(client, spec, timeout=timeout, progress=progress)

    def run(self) -> JobOutcome:
        attempts = 0
        try:
            while True:
                attempts += 1
                status, requeued = self._one_attempt()
                if not requeued:
                    return JobOutcome(status, _exit_status(status), attempts)
        finally:
            self.queue.withdraw()

    def _one_attempt(self) -> tuple[JobStatus, bool]:
        request = self.queue.wait_for_grant()
        holding = Holding(self.client, request, on_notice=_ignore, on_lost=_ignore)
        final: JobStatus | None = None
        try:
            lease = holding.activate()
            assert holding.pool is not None
            runner = self.runner_for(holding.pool)
            env = {URL_ENV: self.client.url, **lease_env(lease), **scoped_token_env(self.client, lease.id)}
            launch = JobLaunch(lease=lease, pool=holding.pool, command=self.command, image=self.image, env=env)
            job = runner.find(launch)
            if job is None:
                job = runner.submit(launch)
                self.say(
                    f"lease {lease.id} on pool {lease.pool}, attempt {lease.attempt}: submitted job {job.job_id} "
                    f"({shlex.join(self.command)})"
                )
            else:
                self.say(f"lease {lease.id}, attempt {lease.attempt}: found job {job.job_id} ({job.provider_state})")
            try:
                final = self._watch(runner, holding, job)
            except BaseException:
                _cancel_abandoned(runner, job)
                raise
        finally:
            # Released only here, after the job is terminal (or watching failed for good: the lease then
            # ends with this process, as any holder's would).
            holding.release()
        requeued = holding.requeued_request() if final.phase != JobPhase.SUCCEEDED else None
        if requeued is None:
            self.queue.done()
            self.say(f"job {final.job_id} {final.phase.value}" + (f": {final.message}" if final.message else ""))
            return final, False
        self.queue.requeued(requeued)
        pause = self.backoff.delay(requeued.attempt)
        self.say(
            f"job {final.job_id} {final.phase.value}; request {requeued.id} requeued: attempt {requeued.attempt} "
            f"is submitted when it is granted again (after {pause:.1f} s)"
        )
        time.sleep(pause)
        return final, True

    def _watch(self, runner: JobRunner, holding: Holding, job: JobStatus) -> JobStatus:
        """Poll the job until it is terminal; cancel it at the preemption deadline (or at once when the
        lease was lost). The heartbeat thread of ``holding`` keeps the lease alive meanwhile."""
        shown = job.phase
        cancelled = False
        while not job.phase.terminal:
            if not cancelled and _cancel_due(holding):
                why = "preemption deadline reached" if holding.notice is not None else "the lease ended"
                self.say(f"{why}: cancelling job {job.job_id}")
                runner.cancel(job.job_id)
                cancelled = True
            time.sleep(self.poll_s)
            job = runner.status(job.job_id)
            if job.phase != shown:
                shown = job.phase
                self.say(f"job {job.job_id} {job.phase.value} ({job.provider_state})")
        return job


def scoped_token_env(client: Client, lease_id: str) -> dict[str, str]:
    """``RESPOOLS_TOKEN``: a token for the job's own lease only (heartbeat, release, hear notice) that ends
    with the lease, so the subject's token never leaves this machine. A server without lease-scoped
    tokens answers 404: the job then gets none, as before."""
    try:
        return {TOKEN_ENV: client.lease_token(lease_id)}
    except ApiError as exc:
        if exc.status != 404:
            raise
        log.warning("lease %s: the server issues no lease-scoped token (%s); the job gets none", lease_id, exc)
        return {}


def _cancel_abandoned(runner: JobRunner, job: JobStatus) -> None:
    """Watching ended early (Ctrl-C, the provider refusing for good): the lease is about to be released,
    so the job must not run on in capacity nobody accounts for."""
    try:
        runner.cancel(job.job_id)
    except JobError as exc:
        log.warning("job %s: cancelling it failed (%s); stop it at the provider", job.job_id, exc)
    else:
        log.warning("job %s: watching it ended early, so it was cancelled", job.job_id)


def _cancel_due(holding: Holding) -> bool:
    if holding.lost is not None:
        return True
    if holding.notice is None:
        return False
    deadline = holding.lease.preempt_deadline if holding.lease is not None else None
    return deadline is None or datetime.now(UTC) >= deadline


def _exit_status(status: JobStatus) -> int:
    if status.phase == JobPhase.SUCCEEDED:
        return 0
    return CANCELLED_STATUS if status.phase == JobPhase.CANCELLED else FAILED_STATUS


def _ignore(news: type[LeaseLost]) -> None:
    """The watch loop reads the holding's ``notice`` and ``lost`` itself, on its own clock."""


__all__ = ["JobError", "JobOutcome", "JobRun", "stack_runner"]

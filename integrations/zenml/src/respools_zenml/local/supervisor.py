"""The pooled local orchestrator's loop for one pooled step: wait for the grant, run the step in its own
process, enforce the preemption deadline, make sure the lease ends, and retry as ZenML would.

The retry loop mirrors ZenML's own (``zenml.execution.step.utils.launch_step``): up to
``StepRetryConfig.max_retries`` more attempts after a failure, pausing ``delay`` seconds (times
``backoff`` after each). A preempted step is such a failure; its next attempt submits under the same
idempotency key and so waits at the request's original place in the queue.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from uuid import UUID

from zenml.client import Client as ZenClient
from zenml.config.step_configurations import Step
from zenml.exceptions import RunStoppedException
from zenml.orchestrators.publish_utils import publish_failed_step_run

from respools import ApiError, Client, ServerUnreachable
from respools.model import Lease, RequestState
from respools_zenml.identity import StepIdentity
from respools_zenml.leasing import LeaseArgs
from respools_zenml.local.step_process import EXIT_STOPPED, EXIT_SUCCEEDED, command
from respools_zenml.waiting import HELD, LeaseRefused, claim, wait_for_grant, withdraw

log = logging.getLogger(__name__)

WATCH_S = 0.5
"""How often the orchestrator looks at the step's process and lease."""
LOST_KILL_AFTER_S = 5.0
"""How long a step may run on after its lease ended without notice (expired, cancelled by an admin)."""
STOP_WAIT_S = 10.0
FENCED = 128 + signal.SIGKILL
"""Exit status of a step whose ``respools.lease()`` fenced its process at the preemption deadline (a
SIGKILL's, as a shell reports it): ended like one we killed, so its step run is failed the same way."""


class StepProcessFailed(RuntimeError):
    """The step's last attempt failed; ZenML's step run says how."""


@dataclass
class Launch:
    """What the orchestrator needs to start a step's process."""

    snapshot_id: UUID
    step: Step
    orchestrator_run_id: str
    source_root: str
    env: dict[str, str]


class StepProcessSupervisor:
    """Runs one pooled step to its end (success, final failure, or a stopped run)."""

    def __init__(self, client: Client, args: LeaseArgs, identity: StepIdentity, launch: Launch) -> None:
        self.client = client
        self.args = args
        self.identity = identity
        self.launch = launch

    def run(self) -> None:
        retry = self.launch.step.config.retry
        retries = retry.max_retries if retry else 0
        delay = float(retry.delay) if retry else 0.0
        backoff = float(retry.backoff) if retry else 1.0
        for attempt in range(retries + 1):
            status = self._attempt()
            if status == EXIT_SUCCEEDED:
                return
            if status == EXIT_STOPPED:
                raise RunStoppedException(f"the run was stopped during step {self.identity.step_name!r}")
            if attempt < retries:
                log.info("Sleeping for %g seconds before retrying step `%s`.", delay, self.identity.step_name)
                time.sleep(delay)
                delay *= backoff
        raise StepProcessFailed(f"step {self.identity.step_name!r} failed after {retries + 1} attempt(s)")

    def _attempt(self) -> int:
        args, request = claim(self.client, self.args, self.identity)
        try:
            request = wait_for_grant(self.client, request, self.identity.step_name)
        except LeaseRefused:
            raise
        except BaseException:
            withdraw(self.client, request)  # interrupted while queued: leave the queue
            raise
        assert request.lease_id is not None
        return self._run_process(args, request.lease_id)

    def _run_process(self, args: LeaseArgs, lease_id: str) -> int:
        env = {**os.environ, **self.launch.env, **args.to_env()}
        argv = command(
            self.launch.snapshot_id, self.identity.step_name, self.launch.orchestrator_run_id, self.launch.source_root
        )
        process = subprocess.Popen(argv, env=env, start_new_session=True)
        watch = _LeaseWatch(self.client, lease_id)
        killed = False
        try:
            while True:
                try:
                    process.wait(WATCH_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                kill_at = watch.kill_at()
                if kill_at is not None and time.time() >= kill_at and not killed:
                    log.warning("Step %s: lease %s is past its deadline; killing the step.", args.step_name, lease_id)
                    _signal_group(process, signal.SIGKILL)
                    killed = True
        except BaseException:
            _stop(process)  # the orchestrator itself was interrupted (Ctrl-C): the step goes too
            killed = True
            raise
        finally:
            _signal_group(process, signal.SIGKILL)  # workers the step left behind would keep the GPUs
            self._end_lease(lease_id)
            if killed or process.returncode is None or process.returncode < 0 or process.returncode == FENCED:
                self._fail_unfinished_step_run()
        return process.returncode if process.returncode is not None and process.returncode >= 0 else 1

    def _end_lease(self, lease_id: str) -> None:
        """Release the lease if the step's process did not (it was killed, or died): for a lease under
        notice that completes the preemption, and the server requeues the request as usual."""
        try:
            lease = self.client.get_lease(lease_id)
            if lease.state in HELD:
                self.client.release(lease_id)
        except (ApiError, ServerUnreachable) as exc:
            log.warning("respools: could not make sure lease %s ended (%s); it expires after its TTL", lease_id, exc)

    def _fail_unfinished_step_run(self) -> None:
        """A killed step process cannot record its own end; without this the step run stays 'running'."""
        zen = ZenClient()
        runs = zen.list_pipeline_runs(orchestrator_run_id=self.launch.orchestrator_run_id, size=1)
        if not runs.items:
            return
        steps = zen.list_run_steps(
            pipeline_run_id=runs.items[0].id, name=self.identity.step_name, sort_by="desc:created", size=1
        )
        if steps.items and not steps.items[0].status.is_finished:
            publish_failed_step_run(steps.items[0].id)


class _LeaseWatch:
    """Reads the lease from the server about once a second and says when its step must be gone."""

    def __init__(self, client: Client, lease_id: str) -> None:
        self.client = client
        self.lease_id = lease_id
        self._next = 0.0
        self._kill_at: float | None = None

    def kill_at(self) -> float | None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + 1.0
            with contextlib.suppress(ApiError, ServerUnreachable):
                self._kill_at = _deadline(self.client.get_lease(self.lease_id), self._kill_at)
        return self._kill_at


def _deadline(lease: Lease, known: float | None) -> float | None:
    """Wall-clock time at which the step must be gone: the grace deadline once it got notice (also after
    it released the lease, while ZenML records the failure); shortly after the server ended the lease
    without notice; never while it holds the lease or after it gave it back itself."""
    if lease.state in (RequestState.PREEMPTING, RequestState.PREEMPTED):
        return lease.preempt_deadline.timestamp() if lease.preempt_deadline is not None else time.time()
    if lease.state in (RequestState.EXPIRED, RequestState.CANCELLED):
        return known if known is not None else time.time() + LOST_KILL_AFTER_S
    return None


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def _stop(process: subprocess.Popen[bytes]) -> None:
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()

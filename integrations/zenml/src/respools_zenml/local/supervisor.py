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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from zenml.client import Client as ZenClient
from zenml.config.retry_config import StepRetryConfig
from zenml.exceptions import RunStoppedException
from zenml.orchestrators.publish_utils import publish_failed_step_run

from respools import ApiError, Client, ServerUnreachable
from respools.model import Lease, RequestState
from respools_zenml.identity import StepIdentity
from respools_zenml.leasing import LeaseArgs
from respools_zenml.local.step_process import EXIT_STOPPED, EXIT_SUCCEEDED
from respools_zenml.local.warm import WarmSpare
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

    argv: list[str]
    """The step process's command line (static pipelines: :mod:`.step_process`; dynamic pipelines' isolated
    steps: ZenML's step operator entrypoint)."""
    retry: StepRetryConfig | None
    orchestrator_run_id: str
    env: dict[str, str]
    step_run_id: UUID | None = None
    """The step run the process runs, where it exists before the process (isolated steps)."""
    spare: WarmSpare | None = None
    order: dict[str, str] | None = None
    """What a warm spare is told to run instead of ``argv`` (the step's arguments), with the lease's."""


class StepProcessSupervisor:
    """Runs one pooled step to its end (success, final failure, or a stopped run)."""

    def __init__(self, client: Client, args: LeaseArgs, identity: StepIdentity, launch: Launch) -> None:
        self.client = client
        self.args = args
        self.identity = identity
        self.launch = launch
        self.process: subprocess.Popen[bytes] | None = None
        self.stop = threading.Event()
        """Set to stop the step (ZenML's ``stop_isolated_step``): it leaves the queue or its process ends."""

    def run(self) -> None:
        retry = self.launch.retry
        retries = retry.max_retries if retry else 0
        delay = float(retry.delay) if retry else 0.0
        backoff = float(retry.backoff) if retry else 1.0
        for attempt in range(retries + 1):
            status = self.attempt()
            if status == EXIT_SUCCEEDED:
                return
            if status == EXIT_STOPPED:
                raise RunStoppedException(f"the run was stopped during step {self.identity.step_name!r}")
            if attempt < retries:
                log.info("Sleeping for %g seconds before retrying step `%s`.", delay, self.identity.step_name)
                time.sleep(delay)
                delay *= backoff
        raise StepProcessFailed(f"step {self.identity.step_name!r} failed after {retries + 1} attempt(s)")

    def attempt(self) -> int:
        """One attempt: wait for the grant, run the step's process under the lease; its exit status."""
        if self.launch.spare is not None:
            self.launch.spare.prepare()  # boots while the request waits
        args, request = claim(self.client, self.args, self.identity)
        try:
            request = wait_for_grant(
                self.client, request, self.identity.step_name, args.allocation_wait_timeout_s, stop=self.stop
            )
        except LeaseRefused:
            raise
        except BaseException:
            withdraw(self.client, request)  # interrupted while queued: leave the queue
            raise
        assert request.lease_id is not None
        return self._run_process(args, request.lease_id)

    def _run_process(self, args: LeaseArgs, lease_id: str) -> int:
        process = None
        if self.launch.spare is not None and self.launch.order is not None:
            process = self.launch.spare.take({**self.launch.order, "env": args.to_env()})
        if process is None:
            env = {**os.environ, **self.launch.env, **args.to_env()}
            process = subprocess.Popen(self.launch.argv, env=env, start_new_session=True)
        self.process = process
        watch = _LeaseWatch(self.client, lease_id, args)
        killed = False
        try:
            while True:
                try:
                    process.wait(WATCH_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if self.stop.is_set() and not killed:
                    log.info("Step %s: stopping its process, as ZenML asked.", args.step_name)
                    _stop(process)
                    killed = True
                kill_at = watch.kill_at()
                if kill_at is not None and time.time() >= kill_at and not killed:
                    log.warning("Step %s: lease %s %s; killing the step.", args.step_name, lease_id, watch.why)
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
        if self.launch.step_run_id is not None:
            if not ZenClient().zen_store.get_run_step(self.launch.step_run_id, hydrate=False).status.is_finished:
                publish_failed_step_run(self.launch.step_run_id)
            return
        zen = ZenClient()
        runs = zen.list_pipeline_runs(orchestrator_run_id=self.launch.orchestrator_run_id, size=1)
        if not runs.items:
            return
        steps = zen.list_run_steps(
            pipeline_run_id=runs.items[0].id, name=self.identity.step_name, sort_by="desc:created", size=1
        )
        if steps.items and not steps.items[0].status.is_finished:
            publish_failed_step_run(steps.items[0].id)


def run_unleased(launch: Launch, stop: threading.Event, started: Callable[[subprocess.Popen[bytes]], None]) -> int:
    """Run a step that asks for nothing in its own process, as an isolated step without a lease."""
    process = subprocess.Popen(launch.argv, env={**os.environ, **launch.env}, start_new_session=True)
    started(process)
    try:
        while True:
            try:
                return process.wait(WATCH_S)
            except subprocess.TimeoutExpired:
                if stop.is_set():
                    _stop(process)
    finally:
        _signal_group(process, signal.SIGKILL)


class _LeaseWatch:
    """Reads the lease from the server about once a second and says when its step must be gone (and why)."""

    def __init__(self, client: Client, lease_id: str, args: LeaseArgs) -> None:
        self.client = client
        self.lease_id = lease_id
        self.args = args
        self._next = 0.0
        self._kill_at: float | None = None
        self.why = "is past its deadline"

    def kill_at(self) -> float | None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + 1.0
            with contextlib.suppress(ApiError, ServerUnreachable):
                self._kill_at = self._deadline(self.client.get_lease(self.lease_id))
        return self._kill_at

    def _deadline(self, lease: Lease) -> float | None:
        """Wall-clock time at which the step must be gone: the grace deadline once it got notice (at once
        for ``reclaim_tolerance='any'``; also after it released the lease, while ZenML records the
        failure); the end of ``initialization_lease_seconds`` while no heartbeat came; shortly after the
        server ended the lease without notice; never while it holds the lease or after it gave it back."""
        known = self._kill_at
        if lease.state in (RequestState.PREEMPTING, RequestState.PREEMPTED):
            if self.args.stop_at_notice:
                self.why = "got preemption notice and its step tolerates any reclaim (reclaim_tolerance='any')"
                return known if known is not None else time.time()
            self.why = "is past its preemption deadline"
            return lease.preempt_deadline.timestamp() if lease.preempt_deadline is not None else time.time()
        if lease.state == RequestState.GRANTED and self.args.initialization_lease_s is not None:
            self.why = (
                f"saw no heartbeat within initialization_lease_seconds={self.args.initialization_lease_s:g} of "
                "its grant"
            )
            return lease.granted_at.timestamp() + self.args.initialization_lease_s
        if lease.state in (RequestState.EXPIRED, RequestState.CANCELLED):
            self.why = f"was {lease.state.value} by the server"
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

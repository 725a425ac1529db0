"""A dynamic pipeline's isolated steps on the pooled local orchestrator: each one its own lease, its own
process and its own preemption, whether the pipeline launched it inline or from a thread.

ZenML's dynamic pipeline runner launches an isolated step by creating its step run and calling the
orchestrator's ``submit_isolated_step``, from the pipeline's thread or from a worker thread for concurrent
steps, and then asks ``get_isolated_step_status`` until the step ended. Here ``submit_isolated_step``
returns at once and a thread per step run does what the static path does for a step in ``run_step``
(:class:`~respools_zenml.local.supervisor.StepProcessSupervisor`): wait for the grant, start ZenML's
step entrypoint under the lease, stop it at its deadline, end the lease. A retry is a new step run that
ZenML submits again; it claims the same request (same idempotency key) and so keeps its queue position.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from uuid import UUID

from zenml.enums import ExecutionStatus
from zenml.orchestrators.publish_utils import publish_step_run_status_update
from zenml.utils import exception_utils
from zenml.utils.time_utils import utc_now

from respools_zenml.local.step_process import EXIT_SUCCEEDED
from respools_zenml.local.supervisor import Launch, StepProcessSupervisor, run_unleased

log = logging.getLogger(__name__)


class IsolatedStep:
    """One isolated step run, from its submission to the end of its process."""

    def __init__(self, name: str, launch: Launch, supervisor: StepProcessSupervisor | None) -> None:
        assert launch.step_run_id is not None, "an isolated step's run exists before its process"
        self.name = name
        self.step_run_id: UUID = launch.step_run_id
        self.launch = launch
        self.supervisor = supervisor
        self._stop = supervisor.stop if supervisor is not None else threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self._ended: ExecutionStatus | None = None
        self._thread = threading.Thread(target=self._run, name=f"respools-step-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def status(self) -> ExecutionStatus:
        """As ZenML's dynamic runner expects it: provisioning while queued, running while the process runs."""
        if self._ended is not None:
            return self._ended
        started = self.supervisor.process if self.supervisor is not None else self._process
        return ExecutionStatus.RUNNING if started is not None else ExecutionStatus.PROVISIONING

    def wait(self) -> ExecutionStatus:
        self._thread.join()
        return self.status()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        try:
            self._run_to_end()
        finally:
            if self.supervisor is not None:
                self.supervisor.client.close()

    def _run_to_end(self) -> None:
        try:
            if self.supervisor is not None:
                code = self.supervisor.attempt()
            else:
                code = run_unleased(self.launch, self._stop, self._started)
        except BaseException as exc:  # no grant (refused, timed out, stopped): the step run says why
            log.error("Step %s did not run: %s", self.name, exc)
            _publish_failure(self.step_run_id, exc)
            self._ended = ExecutionStatus.STOPPED if self._stop.is_set() else ExecutionStatus.FAILED
            return
        if code == EXIT_SUCCEEDED:
            self._ended = ExecutionStatus.COMPLETED
        else:
            self._ended = ExecutionStatus.STOPPED if self._stop.is_set() else ExecutionStatus.FAILED

    def _started(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process


def _publish_failure(step_run_id: UUID, exc: BaseException) -> None:
    """Fail the step run with the reason, which ZenML shows and re-raises for a step launched in line."""
    try:
        publish_step_run_status_update(
            step_run_id=step_run_id,
            status=ExecutionStatus.FAILED,
            end_time=utc_now(),
            exception_info=exception_utils.collect_exception_information(exc),
        )
    except Exception as publish_error:  # ZenML's monitoring fails the run anyway, without the reason
        log.warning("respools: could not record why step run %s failed: %s", step_run_id, publish_error)


class IsolatedSteps:
    """The orchestrator's isolated step runs, by step run id (ZenML asks about them from several threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[UUID, IsolatedStep] = {}

    def add(self, step: IsolatedStep) -> None:
        with self._lock:
            self._steps[step.step_run_id] = step
        step.start()

    def get(self, step_run_id: UUID) -> IsolatedStep | None:
        with self._lock:
            return self._steps.get(step_run_id)

    def forget(self, step_run_id: UUID) -> None:
        with self._lock:
            self._steps.pop(step_run_id, None)

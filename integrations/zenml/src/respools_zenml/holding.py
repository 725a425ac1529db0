"""The step process's side of a lease: hold it exactly while ZenML runs the step.

ZenML calls every stack component's ``prepare_step_run`` just before a step's inputs are loaded and its
function runs, and ``cleanup_step_run`` right after, in the thread that runs the step. The pooled
orchestrators hold the lease between the two, so ``respools.LeasePreempted`` can only be raised around the
step itself, not while ZenML creates the step run, and ``respools.current_lease()`` works in the step.

The lease was granted before the process started (the orchestrator waited for it), so entering returns at
once. How the step ended decides what happens to the request: after preemption notice, any failure keeps
the requeued request for ZenML's retry (which finds it under the same idempotency key, at its original
queue position); a step that finished anyway, or failed before any notice, leaves nothing queued.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from respools import Client, LeaseLost, LeasePreempted, LeaseSession, NoActiveLease
from respools_zenml.leasing import LeaseArgs
from respools_zenml.metadata import lease_metadata

log = logging.getLogger(__name__)


class StepFailed(Exception):
    """Stands for the step's own exception, which ZenML does not pass to ``cleanup_step_run``."""


class StepLeaseHolder:
    """At most one lease per step process: the process runs one step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: LeaseSession | None = None
        self._step: str | None = None
        self.last: LeaseSession | None = None
        """The session of the last step this process ran (for tests and the process's exit status)."""

    @property
    def session(self) -> LeaseSession | None:
        return self._session

    def hold(self, args: LeaseArgs, client: Client) -> LeaseSession:
        """Enter the lease for ``args`` in the calling thread (the step's)."""
        with self._lock:
            if self._session is not None:
                raise RuntimeError(f"step process already holds the lease of step {self._step!r}")
            session = self.last = args.session(client)
            session.__enter__()  # notice that came before the step started raises here, and is recorded
            self._session, self._step = session, args.step_name
        log.info("respools: step %s holds lease %s on pool %s", args.step_name, session.id, session.pool)
        return session

    def metadata(self) -> dict[str, Any]:
        session = self._session or self.last
        return lease_metadata(session) if session is not None and _granted(session) else {}

    def release(self, step_failed: bool) -> None:
        """Leave the lease as the step ended; a no-op when none is held."""
        with self._lock:
            session, self._session, self._step = self._session, None, None
        if session is None:
            return
        outcome = _outcome(session, step_failed)
        try:
            session.__exit__(type(outcome) if outcome else None, outcome, None)
        except LeaseLost as foreign:  # another lease's notice landing here; nothing of ours to do
            log.warning("respools: %s", foreign)


def _outcome(session: LeaseSession, step_failed: bool) -> BaseException | None:
    """The exception that describes the step's end to the session: after notice, any failure is the
    preemption (the user may have caught it, saved a checkpoint and raised something else)."""
    if not step_failed:
        return None
    lease = session.lease
    if session.preempted:
        return LeasePreempted(lease=lease, deadline=lease.preempt_deadline, reason=lease.preempt_reason)
    if session.lost:
        return LeaseLost(lease=lease, state=lease.state)
    return StepFailed(f"step failed while holding lease {lease.id}")


def _granted(session: LeaseSession) -> bool:
    try:
        session.lease  # noqa: B018  (raises until the session was granted)
    except NoActiveLease:
        return False
    return True


HOLDER = StepLeaseHolder()
"""The process-wide holder the pooled orchestrators use."""

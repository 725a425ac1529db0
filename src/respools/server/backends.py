"""The service's use of stack backends: vetting a pool against its stack when it is defined, and
stopping the workload of a lease whose preemption deadline passed."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from respools.backends import Backend, BackendError, get_backend
from respools.model import Lease, PoolSpec, RequestState
from respools.server.errors import invalid
from respools.server.schemas import StopConfirmation

log = logging.getLogger(__name__)


def vet_pool(pool: PoolSpec) -> PoolSpec:
    """Check ``pool`` with its backend and fill in the forms it hands out when none were given.

    Raises a 422 naming ``stack`` (unknown or broken backend) or ``forms`` (a form the stack cannot
    express)."""
    try:
        backend = get_backend(pool.stack)
    except BackendError as exc:
        raise invalid(f"{exc}: install the integration or pick another stack", "stack") from exc
    try:
        backend.validate_pool(pool)
    except BackendError as exc:
        field = "forms" if pool.forms is not None and "cannot express" in str(exc) else "settings"
        raise invalid(str(exc), field) from exc
    except ValueError as exc:  # backends validate their settings with pydantic
        raise invalid(f"settings for stack {pool.stack!r} are invalid: {exc}", "settings") from exc
    if pool.forms is None:
        forms = sorted(backend.effective_forms(pool), key=lambda f: f.value)
        pool = pool.model_copy(update={"forms": forms})
    return pool


CONFIRM_CHECKS = 30
CONFIRM_EVERY_S = 2.0
"""How long the service keeps asking a backend to confirm a stop (a minute); after that the lease waits
for its holder's release, a runner's or agent's confirmation, or its TTL."""

Confirm = Callable[[str, StopConfirmation], object]
"""Records a backend's confirmation that a lease's workload stopped (``ops.leases.confirm_stop``)."""


class WorkloadStopper:
    """Stops workloads of overdue leases off the reconciler's thread (a backend may wait out a SIGKILL
    grace period, and the next cycle must not wait for it), then asks the backend to confirm the stop
    and records a confirmation, which hands the lease's capacity over (DESIGN §2.8)."""

    def __init__(self, confirm: Confirm | None = None) -> None:
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="respools-stop")
        self._confirm = confirm
        self._stopped = False

    def stop(self, lease: Lease, pool: PoolSpec) -> None:
        self._executor.submit(self._stop, lease, pool)

    def _stop(self, lease: Lease, pool: PoolSpec) -> None:
        try:
            backend = get_backend(pool.stack)
            backend.stop(lease, pool)
        except Exception:
            log.exception(
                "stopping an overdue lease's workload failed", extra={"lease_id": lease.id, "pool": pool.name}
            )
            return
        # A backend that cannot tell from here leaves the lease to a release, a runner's confirmation or the TTL.
        can_tell = type(backend).confirm_stopped is not Backend.confirm_stopped
        if self._confirm is not None and lease.state == RequestState.PREEMPTING and can_tell:
            self._check(backend, lease, pool, 1)

    def _check(self, backend: Backend, lease: Lease, pool: PoolSpec, check: int) -> None:
        """Ask the backend to confirm the stop; ask again later while it cannot yet (a cancelled cloud job
        takes a while to be terminal, a killed process a moment to free its GPU memory)."""
        try:
            evidence = backend.confirm_stopped(lease, pool)
            if evidence is not None and self._confirm is not None:
                self._confirm(lease.id, StopConfirmation(backend=backend.name, evidence=evidence))
                return
        except Exception:
            log.exception("confirming a stop failed", extra={"lease_id": lease.id, "pool": pool.name})
        if check < CONFIRM_CHECKS and not self._stopped:
            timer = threading.Timer(CONFIRM_EVERY_S, lambda: self._submit(self._check, backend, lease, pool, check + 1))
            timer.daemon = True
            timer.start()

    def _submit(self, check: Callable[..., None], *arguments: object) -> None:
        with contextlib.suppress(RuntimeError):  # shut down meanwhile
            self._executor.submit(check, *arguments)

    def shutdown(self) -> None:
        self._stopped = True
        self._executor.shutdown(wait=False, cancel_futures=True)

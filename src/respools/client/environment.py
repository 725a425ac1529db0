"""A lease in the workload's terms: the environment its process needs, set for the duration of the lease.

The pool's stack backend does the translation (``CUDA_VISIBLE_DEVICES`` as GPU or MIG UUIDs, memory caps
for fractions). A lease on a pool without an inventory has no placement: the pool does not know which
devices are used, so no device variables are set and the process keeps the devices it sees. Every
workload also learns its lease id and attempt number, so it can name checkpoints and resume.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from respools.backends import BackendError, Realization, get_backend
from respools.backends.local.holders import register_holder, unregister_holder
from respools.client.errors import LeaseError
from respools.model import Lease, PoolSpec

log = logging.getLogger("respools.client")

LEASE_ID_ENV = "RESPOOLS_LEASE_ID"
ATTEMPT_ENV = "RESPOOLS_ATTEMPT"
REQUEST_ID_ENV = "RESPOOLS_REQUEST_ID"
LOCAL_STACK = "local"


class RealizationError(LeaseError):
    """The lease cannot be used from here (placed on another host, a backend that cannot express it)."""


def lease_env(lease: Lease) -> dict[str, str]:
    """What every workload of a lease learns about it, whatever the stack."""
    return {LEASE_ID_ENV: lease.id, REQUEST_ID_ENV: lease.request_id, ATTEMPT_ENV: str(lease.attempt)}


def realize(lease: Lease, pool: PoolSpec | None) -> Realization:
    """The lease's realization for a process on this machine, its env completed by :func:`lease_env`."""
    if pool is None or not lease.placement.items:
        notes = ["the lease has no placement (the pool has no inventory): device variables are left as they are"]
        return Realization(backend=lease.stack, env=lease_env(lease), notes=notes)
    try:
        backend = get_backend(lease.stack)
    except BackendError as exc:
        log.warning("lease %s: %s; device variables are left as they are", lease.id, exc)
        return Realization(backend=lease.stack, env=lease_env(lease), notes=[str(exc)])
    try:
        realization = backend.realize(lease, pool)
    except BackendError as exc:
        raise RealizationError(f"lease {lease.id} cannot be used here: {exc}") from exc
    return realization.model_copy(update={"env": realization.env | lease_env(lease)})


class EnvOverlay:
    """Sets variables in ``os.environ`` and puts the previous values back (``os.environ`` is the process's,
    so the lease's devices reach libraries that read it lazily, like CUDA at first use)."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] = {}

    def apply(self, env: Mapping[str, str]) -> None:
        for key, value in env.items():
            if key not in self._saved:
                self._saved[key] = os.environ.get(key)
            os.environ[key] = value

    def restore(self) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved.clear()


def register_local_holder(lease: Lease, *, pid: int | None = None, pgid: int | None = None) -> bool:
    """Tell this host's agent which process runs ``lease`` (local stack only), so its watchdog can
    attribute GPU memory and its stopper can end the workload at the deadline. Failing to register only
    weakens those, so it is logged, not raised."""
    if lease.stack != LOCAL_STACK:
        return False
    try:
        register_holder(lease, pid=pid, pgid=pgid)
    except (OSError, ValueError) as exc:
        log.warning("lease %s: could not register the holder process for the host agent: %s", lease.id, exc)
        return False
    return True


def unregister_local_holder(lease: Lease, directory: Path | None = None) -> None:
    if lease.stack != LOCAL_STACK:
        return
    unregister_holder(lease.id, directory=directory)

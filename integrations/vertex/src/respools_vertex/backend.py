"""The ``vertex`` backend: whole GPUs as a custom job's machine spec; capacity is quota, not inventory."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from respools.backends.jobs import JobLaunch
from respools.backends.protocol import Backend, BackendError, Realization
from respools.model import GPU, MILLI, Form, Host, Lease, PoolSpec, format_resources, is_mig_key
from respools_vertex.accelerators import pool_accelerator
from respools_vertex.jobs import (
    JobClientFactory,
    cancel_lease_jobs,
    default_job_client,
    location,
    unfinished_lease_jobs,
)
from respools_vertex.machines import machine_for, valid_counts
from respools_vertex.quota import CloudQuotas, QuotaSource
from respools_vertex.runner import VertexJobRunner
from respools_vertex.settings import VertexSettings, settings_of
from respools_vertex.spec import LEASE_LABEL, custom_job_fragment, lease_label_value

log = logging.getLogger(__name__)


class VertexBackend(Backend):
    """Vertex AI custom training. Jobs get whole machines: MIG and fractions are not expressible and are
    refused when the pool is defined. ``realize`` returns a ``CustomJob`` fragment in ``native["custom_job"]``;
    merge it with :func:`respools_vertex.apply_to_custom_job`."""

    name: ClassVar[str] = "vertex"
    runs_jobs: ClassVar[bool] = True
    forms: ClassVar[frozenset[Form]] = frozenset({Form.WHOLE})

    def __init__(
        self,
        quota_source: QuotaSource | None = None,
        job_client_factory: JobClientFactory | None = None,
        *,
        retry_backoff_s: float = 1.0,
    ) -> None:
        self._retry_backoff_s = retry_backoff_s
        self._quota_source = quota_source or CloudQuotas()
        self._job_client_factory = job_client_factory or default_job_client

    def validate_pool(self, pool: PoolSpec) -> None:
        super().validate_pool(pool)
        settings = settings_of(pool)
        metered_mig = sorted(key for key in pool.capacity if is_mig_key(key))
        if metered_mig:
            raise BackendError(
                f"pool {pool.name!r}: stack 'vertex' cannot express mig ({', '.join(metered_mig)}); it supports whole"
            )
        if pool.capacity.get(GPU, 0) % MILLI:
            raise BackendError(
                f"pool {pool.name!r}: stack 'vertex' cannot express fraction "
                f"(capacity {format_resources({GPU: pool.capacity[GPU]})}); it supports whole"
            )
        if pool.inventory is not None:
            raise BackendError(
                f"pool {pool.name!r}: Vertex provisions a machine per job, so a vertex pool has no inventory; "
                "its capacity is the project's GPU quota (settings.gpu_quota, or read from Google)"
            )
        accelerator = pool_accelerator(pool, settings)
        valid_counts(accelerator)  # refuses an accelerator respools has no machine table for
        for count, machine_type in settings.machine_types.items():
            machine_for(accelerator, count, machine_type)

    def discover(self, pool: PoolSpec) -> list[Host]:
        """No hosts: Vertex machines exist only while a job runs. Capacity is quota; see :meth:`capacity`."""
        return []

    def capacity(self, pool: PoolSpec) -> dict[str, int]:
        """The pool's GPU capacity (milli-GPU): ``settings.gpu_quota``, else the project's quota for its
        accelerator in its region."""
        settings = settings_of(pool)
        if settings.gpu_quota is not None:
            return {GPU: settings.gpu_quota * MILLI}
        return {GPU: self._quota_source(settings, pool_accelerator(pool, settings)) * MILLI}

    def capacity_warnings(self, pool: PoolSpec) -> list[str]:
        """The pool's ``gpu`` capacity against the project's regional quota for its accelerator (read from
        Google unless ``settings.gpu_quota`` states it)."""
        promised = pool.capacity.get(GPU, 0) // MILLI
        settings = settings_of(pool)
        if settings.gpu_quota is None and settings.project is None:
            return []
        quota = self.capacity(pool)[GPU] // MILLI
        if promised <= quota:
            return []
        accelerator = pool_accelerator(pool, settings)
        return [
            f"pool {pool.name!r} promises {promised} GPUs but the {accelerator} training quota in "
            f"{settings.region} is {quota}: requests beyond it queue at Vertex AI, holding their leases"
        ]

    def realize(self, lease: Lease, pool: PoolSpec) -> Realization:
        settings = settings_of(pool)
        count = _whole_gpus(lease)
        accelerator = pool_accelerator(pool, settings)
        shape = machine_for(accelerator, count, settings.machine_types.get(count))
        fragment = custom_job_fragment(lease.id, accelerator, shape, spot=settings.spot)
        native: dict[str, Any] = {"custom_job": fragment}
        if settings.project is not None:
            native["location"] = location(settings)
        notes = [f"{count} x {accelerator} on {shape.machine_type}" + (" (Spot)" if settings.spot else "")]
        return Realization(backend=self.name, env={"RESPOOLS_LEASE_ID": lease.id}, native=native, notes=notes)

    def job_runner(self, pool: PoolSpec) -> VertexJobRunner:
        """Custom container jobs in the pool's project, on the machine :meth:`realize` gives each lease."""
        settings = _with_project(pool)

        def fragment(launch: JobLaunch) -> dict[str, Any]:
            custom_job: dict[str, Any] = self.realize(launch.lease, launch.pool).native["custom_job"]
            return custom_job

        return VertexJobRunner(self._job_client_factory(settings), settings, fragment, backoff_s=self._retry_backoff_s)

    def stop(self, lease: Lease, pool: PoolSpec) -> None:
        settings = _with_project(pool)
        cancelled = cancel_lease_jobs(self._job_client_factory(settings), settings, lease_label_value(lease.id))
        log.info("lease %s: cancelled %s", lease.id, ", ".join(cancelled) or "no running job")

    def confirm_stopped(self, lease: Lease, pool: PoolSpec) -> str | None:
        """Confirmed once every custom job of the lease is terminal (a cancelling job may still hold its
        machines), so the service may hand an overdue lease's GPUs over (DESIGN §2.8)."""
        settings = _with_project(pool)
        label = lease_label_value(lease.id)
        if unfinished_lease_jobs(self._job_client_factory(settings), settings, label):
            return None
        return f"every custom job labelled {LEASE_LABEL}={label} in {location(settings)} is in a terminal state"


def _whole_gpus(lease: Lease) -> int:
    mig = sorted(key for key in lease.resources if is_mig_key(key))
    if mig:
        raise BackendError(f"lease {lease.id}: stack 'vertex' cannot express mig ({', '.join(mig)}); it supports whole")
    gpu = lease.resources.get(GPU, 0)
    if gpu % MILLI:
        raise BackendError(
            f"lease {lease.id}: stack 'vertex' cannot express fraction ({format_resources({GPU: gpu})}); "
            "it supports whole"
        )
    if not gpu:
        raise BackendError(f"lease {lease.id}: asks for no GPUs; a vertex pool hands out whole GPUs")
    return gpu // MILLI


def _with_project(pool: PoolSpec) -> VertexSettings:
    settings = settings_of(pool)
    if settings.project is None:
        raise BackendError(f"pool {pool.name!r}: running and stopping Vertex jobs needs settings.project")
    return settings

"""The ``databricks`` backend: whole GPUs as a GPU job cluster, fractions as Spark task GPU amounts on the
pool's shared GPU cluster; MIG is not expressible on Databricks."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from respools.backends.jobs import JobLaunch
from respools.backends.protocol import Backend, BackendError, Realization
from respools.model import GPU, MILLI, Form, Host, Lease, PoolSpec, format_resources, is_mig_key
from respools_databricks.node_types import cluster_shape
from respools_databricks.runner import DatabricksJobRunner
from respools_databricks.runs import active_lease_runs, cancel_lease_runs
from respools_databricks.runtime import require_gpu_ml_runtime
from respools_databricks.settings import DatabricksSettings, settings_of
from respools_databricks.spec import LEASE_TAG, job_cluster, lease_tag_value, shared_cluster_task
from respools_databricks.workspace import WorkspaceFactory, WorkspaceFacts, default_workspace

log = logging.getLogger(__name__)

LEASE_ID_ENV = "RESPOOLS_LEASE_ID"
FRACTION_ENV = "RESPOOLS_GPU_FRACTION"


class DatabricksBackend(Backend):
    """Databricks Jobs. ``realize`` returns ``native["job_cluster"]`` (whole GPUs) or
    ``native["existing_cluster_id"]`` with ``spark_conf`` (fractions); merge either into the step's job with
    :func:`respools_databricks.attach_to_job`."""

    name: ClassVar[str] = "databricks"
    runs_jobs: ClassVar[bool] = True
    forms: ClassVar[frozenset[Form]] = frozenset({Form.WHOLE, Form.FRACTION})

    def __init__(self, workspace_factory: WorkspaceFactory | None = None, *, retry_backoff_s: float = 1.0) -> None:
        self._retry_backoff_s = retry_backoff_s
        self._workspace_factory = workspace_factory or default_workspace
        self._facts = WorkspaceFacts(self._workspace_factory)

    def validate_pool(self, pool: PoolSpec) -> None:
        super().validate_pool(pool)
        settings = settings_of(pool)
        metered_mig = sorted(key for key in pool.capacity if is_mig_key(key))
        if metered_mig or any(gpu.mig_enabled for host in pool.inventory or [] for gpu in host.gpus):
            raise BackendError(
                f"pool {pool.name!r}: stack 'databricks' cannot express mig; it supports fraction, whole"
            )
        if pool.forms is not None and Form.FRACTION in pool.forms and settings.cluster_id is None:
            raise BackendError(
                f"pool {pool.name!r}: fractions on Databricks run on a shared GPU cluster; set "
                "settings.cluster_id, or drop 'fraction' (whole remains)"
            )
        if settings.spark_version is not None:
            require_gpu_ml_runtime(settings.spark_version)

    def effective_forms(self, pool: PoolSpec) -> frozenset[Form]:
        """Fractions only where the pool names the shared cluster they pack onto."""
        forms = super().effective_forms(pool)
        return forms if settings_of(pool).cluster_id is not None else forms - {Form.FRACTION}

    def discover(self, pool: PoolSpec) -> list[Host]:
        """No hosts: job clusters exist only while their run does. Capacity is the pool's own."""
        return []

    def realize(self, lease: Lease, pool: PoolSpec) -> Realization:
        settings = settings_of(pool)
        gpu = self._gpu_of(lease, pool)
        if gpu % MILLI == 0:
            return self._whole(lease, settings, gpu // MILLI)
        if gpu > MILLI:
            raise BackendError(
                f"lease {lease.id}: {format_resources({GPU: gpu})} is neither whole GPUs nor one fraction; "
                "stack 'databricks' supports whole GPUs (a job cluster) or a fraction (a Spark task amount)"
            )
        return self._fraction(lease, settings, gpu)

    def capacity_warnings(self, pool: PoolSpec) -> list[str]:
        """Whether the workspace has GPU node types for the pool's whole GPUs (``settings.node_types``, else
        the workspace's list): a pool whose GPUs no cluster can carry would grant leases that never run."""
        if not pool.capacity.get(GPU, 0) // MILLI:
            return []
        settings = settings_of(pool)
        sizes = self._facts.node_types(settings)
        if not sizes:
            return [
                f"pool {pool.name!r}: the workspace {settings.host or '(default)'} lists no usable GPU node type; "
                "whole-GPU leases could not become clusters (set settings.node_types, or enable GPU instances)"
            ]
        return []

    def job_runner(self, pool: PoolSpec) -> DatabricksJobRunner:
        """One-time runs in the pool's workspace, each on the job cluster :meth:`realize` gives its lease."""
        settings = settings_of(pool)
        return DatabricksJobRunner(
            self._workspace_factory(settings), self.launch_cluster, backoff_s=self._retry_backoff_s
        )

    def launch_cluster(self, launch: JobLaunch) -> dict[str, Any]:
        """The job cluster a launch's lease runs on (the Jobs API's JSON): only whole-GPU leases have one."""
        native = self.realize(launch.lease, launch.pool).native
        if "job_cluster" not in native:
            raise BackendError(
                f"lease {launch.lease.id}: a job of its own runs whole-GPU leases as job clusters; a fraction "
                "runs on the shared cluster, where a run is started by the job that owns it"
            )
        job_cluster: dict[str, Any] = native["job_cluster"]
        return job_cluster

    def stop(self, lease: Lease, pool: PoolSpec) -> None:
        settings = settings_of(pool)
        cancelled = cancel_lease_runs(self._workspace_factory(settings), lease_tag_value(lease.id))
        log.info("lease %s: cancelled runs %s", lease.id, ", ".join(map(str, cancelled)) or "none (none active)")

    def confirm_stopped(self, lease: Lease, pool: PoolSpec) -> str | None:
        """Confirmed once no run of the lease is active any more (a terminating run still holds its
        cluster), so the service may hand an overdue lease's GPUs over (DESIGN §2.8)."""
        tag = lease_tag_value(lease.id)
        if active_lease_runs(self._workspace_factory(settings_of(pool)), tag):
            return None
        return f"no active run tagged {LEASE_TAG}={tag} is left in the workspace"

    def _gpu_of(self, lease: Lease, pool: PoolSpec) -> int:
        supported = self.effective_forms(pool)
        gpu = lease.resources.get(GPU, 0)
        asked = {Form.MIG} if any(is_mig_key(key) for key in lease.resources) else set()
        if gpu % MILLI:
            asked.add(Form.FRACTION)
        elif gpu:
            asked.add(Form.WHOLE)
        missing = sorted(asked - supported)
        if missing:
            raise BackendError(
                f"pool {pool.name!r} on stack 'databricks' cannot express {', '.join(missing)}; "
                f"it supports {', '.join(sorted(supported))}"
            )
        if not gpu:
            raise BackendError(f"lease {lease.id}: asks for no GPUs; a databricks pool hands out GPUs")
        return gpu

    def _whole(self, lease: Lease, settings: DatabricksSettings, count: int) -> Realization:
        shape = cluster_shape(count, self._facts.node_types(settings), settings.driver_node_type_id)
        env = {LEASE_ID_ENV: lease.id}
        native: dict[str, Any] = {
            "job_cluster": job_cluster(lease.id, self._facts.spark_version(settings), shape, env),
            "tags": {LEASE_TAG: lease_tag_value(lease.id)},
        }
        layout = "a single node" if shape.single_node else f"{shape.num_workers} workers"
        notes = [f"{count} GPUs as {layout} of {shape.node_type_id}"]
        return Realization(backend=self.name, env=env, native=native, notes=notes)

    def _fraction(self, lease: Lease, settings: DatabricksSettings, milli: int) -> Realization:
        if settings.cluster_id is None:
            raise BackendError("fractions on Databricks run on a shared GPU cluster; set settings.cluster_id")
        native = shared_cluster_task(lease.id, settings.cluster_id, milli)
        notes = [
            f"Spark packs {MILLI // milli} tasks per GPU of cluster {settings.cluster_id} (1 / amount, rounded "
            "down); the cluster conf fixes the amount at start, so on a cluster set otherwise the step requests "
            "it per stage with TaskResourceRequests",
            "a shared cluster's environment is its own: pass the realization's env to the step as task parameters",
        ]
        env = {LEASE_ID_ENV: lease.id, FRACTION_ENV: f"{milli / MILLI:g}"}
        return Realization(backend=self.name, env=env, native=native, notes=notes)

"""A lease as the part of a Vertex ``CustomJob`` that respools owns, and merging it into the step's job.

The fragment is plain JSON in the API's field names (what ``google.cloud.aiplatform.CustomJob`` also takes
as ``worker_pool_specs``)::

    {"labels": {"respools-lease-id": "..."},
     "job_spec": {"worker_pool_specs": [{"machine_spec": {"machine_type": "a2-highgpu-2g",
                                                          "accelerator_type": "NVIDIA_TESLA_A100",
                                                          "accelerator_count": 2},
                                         "replica_count": 1}],
                  "scheduling": {"strategy": "SPOT"}}}          # Spot pools only

It is read back through :class:`google.cloud.aiplatform_v1.CustomJob`, so a field or enum value the API
does not have fails when the lease is realized. The label is how ``stop`` finds the job again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from google.cloud import aiplatform_v1

from respools.backends.protocol import BackendError
from respools_vertex.machines import MachineShape

LEASE_LABEL = "respools-lease-id"
_LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")


def lease_label_value(lease_id: str) -> str:
    """The lease id as a Vertex label value (lowercase letters, digits, '-' and '_', at most 63)."""
    value = lease_id.lower()
    if not _LABEL_VALUE_RE.match(value):
        raise BackendError(
            f"lease id {lease_id!r} cannot be a Vertex label value (lowercase letters, digits, '-' or '_', "
            "at most 63 characters)"
        )
    return value


def custom_job_fragment(lease_id: str, accelerator: str, shape: MachineShape, *, spot: bool) -> dict[str, Any]:
    """The fragment for one lease; validated by building the library's ``CustomJob`` from it."""
    job_spec: dict[str, Any] = {
        "worker_pool_specs": [
            {
                "machine_spec": {
                    "machine_type": shape.machine_type,
                    "accelerator_type": accelerator,
                    "accelerator_count": shape.accelerator_count,
                },
                "replica_count": 1,
            }
        ]
    }
    if spot:
        job_spec["scheduling"] = {"strategy": "SPOT"}
    fragment = {"labels": {LEASE_LABEL: lease_label_value(lease_id)}, "job_spec": job_spec}
    aiplatform_v1.CustomJob(fragment)
    return fragment


def apply_to_custom_job(
    job: aiplatform_v1.CustomJob, fragment: dict[str, Any], env: Mapping[str, str] | None = None
) -> aiplatform_v1.CustomJob:
    """A copy of the step's ``job`` whose chief worker pool runs on the lease's machine.

    The step keeps its container, disks and other pools; respools sets the chief's machine spec (the pool
    the lease's GPUs are for), its replica count, the Spot strategy of a Spot pool, the lease label, and
    ``env`` (the realization's) in the chief's container or Python package environment.
    """
    merged: aiplatform_v1.CustomJob = aiplatform_v1.CustomJob.deserialize(aiplatform_v1.CustomJob.serialize(job))
    wanted = aiplatform_v1.CustomJob(fragment)
    for key, value in wanted.labels.items():
        merged.labels[key] = value
    if not merged.job_spec.worker_pool_specs:
        raise BackendError("the custom job has no worker pool to run the step in")
    chief = merged.job_spec.worker_pool_specs[0]
    ours = wanted.job_spec.worker_pool_specs[0]
    chief.machine_spec = ours.machine_spec
    chief.replica_count = ours.replica_count
    if "scheduling" in fragment["job_spec"]:
        merged.job_spec.scheduling.strategy = wanted.job_spec.scheduling.strategy
    if env:
        _set_env(chief, env)
    return merged


def _set_env(pool: aiplatform_v1.WorkerPoolSpec, env: Mapping[str, str]) -> None:
    runs = pool.python_package_spec if "python_package_spec" in pool else pool.container_spec
    kept = [var for var in runs.env if var.name not in env]
    added = [aiplatform_v1.EnvVar(name=name, value=value) for name, value in sorted(env.items())]
    runs.env = [*kept, *added]

"""A lease in Databricks Jobs terms, built and checked through the SDK's own dataclasses.

Whole GPUs become a *job cluster* (``jobs.JobCluster`` holding a ``compute.ClusterSpec``): GPU node type,
GPU ML runtime, single node or workers. Fractions run on the pool's shared GPU cluster, where the share is
Spark's ``spark.task.resource.gpu.amount``: Spark packs ``1 / amount`` tasks onto each GPU the cluster
already has (a fraction never buys a GPU). Both carry the lease id as a tag, by which ``stop`` finds the
run: on the cluster (``custom_tags``) and on the job (``tags``).

:func:`attach_to_job` merges a realization into the step's ``jobs.JobSettings``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from databricks.sdk.service import compute, jobs

from respools.backends.protocol import BackendError
from respools.model import MILLI
from respools_databricks.node_types import ClusterShape

LEASE_TAG = "respools_lease_id"
TASK_GPU_AMOUNT = "spark.task.resource.gpu.amount"
_TAG_VALUE_RE = re.compile(r"^[A-Za-z0-9_.:=+@-]{1,256}$")
_SINGLE_NODE_CONF = {"spark.databricks.cluster.profile": "singleNode", "spark.master": "local[*, 4]"}
_SINGLE_NODE_TAGS = {"ResourceClass": "SingleNode"}
_MAX_SPARK_FRACTION = 500
"""Spark refuses fractional task amounts above 0.5: a GPU must hold at least two tasks to be shared."""


def lease_tag_value(lease_id: str) -> str:
    """The lease id as a tag value every cloud accepts; refused rather than mangled (stop matches on it)."""
    if not _TAG_VALUE_RE.match(lease_id):
        raise BackendError(f"lease id {lease_id!r} cannot be a Databricks tag value")
    return lease_id


def job_cluster_key(lease_id: str) -> str:
    return "respools_" + re.sub(r"[^\w-]", "_", lease_id)[:90]


def job_cluster(lease_id: str, spark_version: str, shape: ClusterShape, env: Mapping[str, str]) -> dict[str, Any]:
    """The job cluster for a whole-GPU lease, built as SDK dataclasses and written as the Jobs API's JSON;
    ``env`` reaches the step's processes as the cluster's Spark environment variables."""
    tags = {LEASE_TAG: lease_tag_value(lease_id)}
    spec = compute.ClusterSpec(
        spark_version=spark_version,
        node_type_id=shape.node_type_id,
        num_workers=shape.num_workers,
        driver_node_type_id=shape.driver_node_type_id,
        spark_conf=dict(_SINGLE_NODE_CONF) if shape.single_node else None,
        custom_tags={**_SINGLE_NODE_TAGS, **tags} if shape.single_node else tags,
        spark_env_vars=dict(env) or None,
    )
    return jobs.JobCluster(job_cluster_key=job_cluster_key(lease_id), new_cluster=spec).as_dict()


def shared_cluster_task(lease_id: str, cluster_id: str, milli: int) -> dict[str, Any]:
    """Where and how a fractional lease runs: the shared cluster, and the Spark task GPU amount both as the
    cluster conf that packs tasks this way and as the per-stage request
    (``pyspark.resource.TaskResourceRequests().resource("gpu", amount)``) a step uses on a cluster whose
    conf differs."""
    if milli > _MAX_SPARK_FRACTION:
        raise BackendError(
            f"a fraction of {milli / MILLI:g} GPU cannot be a Spark task GPU amount: Spark shares a GPU only "
            "between at least two tasks (amount <= 0.5); ask for 0.5 or less, or a whole GPU"
        )
    conf = compute.ClusterSpec(spark_conf={TASK_GPU_AMOUNT: f"{milli / MILLI:g}"}).as_dict()
    return {
        "existing_cluster_id": cluster_id,
        "spark_conf": conf["spark_conf"],
        "task_resource_requests": {"gpu": milli / MILLI},
        "tags": {LEASE_TAG: lease_tag_value(lease_id)},
    }


def attach_to_job(
    settings: jobs.JobSettings, native: dict[str, Any], task_keys: Collection[str] | None = None
) -> jobs.JobSettings:
    """A copy of the step's job whose tasks (all, or those named) run on the lease's compute."""
    merged = jobs.JobSettings.from_dict(settings.as_dict())
    merged.tags = {**(merged.tags or {}), **native["tags"]}
    cluster = jobs.JobCluster.from_dict(native["job_cluster"]) if "job_cluster" in native else None
    if cluster is not None:
        others = [c for c in merged.job_clusters or [] if c.job_cluster_key != cluster.job_cluster_key]
        merged.job_clusters = [*others, cluster]
    chosen = [task for task in merged.tasks or [] if task_keys is None or task.task_key in task_keys]
    if not chosen:
        raise BackendError("the job has no task to run on the lease's GPUs")
    for task in chosen:
        task.new_cluster = None
        task.environment_key = None
        task.job_cluster_key = cluster.job_cluster_key if cluster is not None else None
        task.existing_cluster_id = None if cluster is not None else native["existing_cluster_id"]
    return merged

"""Stopping a lease's workload on Databricks: cancel the active runs that carry its tag.

A whole-GPU run carries the tag on its job cluster (``custom_tags``), a fractional run on its job
(``tags``), since it runs on a shared cluster. Runs are listed active-only with their tasks; cancelling is
asynchronous on Databricks and is not waited for, so ``stop`` returns once every run was told.
"""

from __future__ import annotations

from collections.abc import Iterator

from databricks.sdk import WorkspaceClient
from databricks.sdk.service.compute import ClusterSpec
from databricks.sdk.service.jobs import BaseRun

from respools_databricks.spec import LEASE_TAG


def cancel_lease_runs(workspace: WorkspaceClient, lease_tag: str) -> list[int]:
    """Cancel the lease's active runs; their run ids."""
    cancelled = active_lease_runs(workspace, lease_tag)
    for run_id in cancelled:
        workspace.jobs.cancel_run(run_id=run_id)
    return cancelled


def active_lease_runs(workspace: WorkspaceClient, lease_tag: str) -> list[int]:
    """Ids of the lease's runs that are not terminated yet (pending, running, terminating: still on
    their clusters' GPUs)."""
    job_tags: dict[int, dict[str, str]] = {}
    active: list[int] = []
    for run in workspace.jobs.list_runs(active_only=True, expand_tasks=True):
        if run.run_id is None:
            continue
        if _cluster_tagged(run, lease_tag) or _job_tagged(workspace, run.job_id, lease_tag, job_tags):
            active.append(run.run_id)
    return active


def _clusters(run: BaseRun) -> Iterator[ClusterSpec]:
    for cluster in run.job_clusters or []:
        if cluster.new_cluster is not None:
            yield cluster.new_cluster
    for task in run.tasks or []:
        if task.new_cluster is not None:
            yield task.new_cluster
    if run.cluster_spec is not None and run.cluster_spec.new_cluster is not None:
        yield run.cluster_spec.new_cluster


def _cluster_tagged(run: BaseRun, lease_tag: str) -> bool:
    return any((cluster.custom_tags or {}).get(LEASE_TAG) == lease_tag for cluster in _clusters(run))


def _job_tagged(
    workspace: WorkspaceClient, job_id: int | None, lease_tag: str, seen: dict[int, dict[str, str]]
) -> bool:
    if job_id is None:
        return False
    if job_id not in seen:
        settings = workspace.jobs.get(job_id).settings
        seen[job_id] = dict(settings.tags or {}) if settings is not None else {}
    return seen[job_id].get(LEASE_TAG) == lease_tag

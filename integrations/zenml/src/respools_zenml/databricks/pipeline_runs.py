"""A ZenML pipeline run as the job of a lease: the Databricks job runner's verbs, where ``submit`` is ZenML's
own Databricks submission (wheel upload, ``jobs/create``, ``jobs/run-now``) and the run is found again by
its job cluster's tags.

The run is a *job run* (``run_type=JOB_RUN``) of the job ZenML created, not a one-time submitted run; its
job cluster carries the lease's tags (lease, request, subject, attempt), by which :meth:`find` finds it —
after ZenML's submission, which does not return the run id, and after a restart. ``status`` and ``cancel``
are the Databricks runner's.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from databricks.sdk import WorkspaceClient
from databricks.sdk.service import compute, jobs
from respools_databricks.runner import DatabricksJobRunner, run_tags

from respools.backends.jobs import JobError, JobLaunch, JobStatus

SubmitPipeline = Callable[[JobLaunch, compute.ClusterSpec], None]
"""Submits the pipeline for one attempt of the lease, its job cluster being the given one."""


class PipelineRunRunner(DatabricksJobRunner):
    """One pipeline's Databricks job runs, one per attempt of its lease."""

    def __init__(
        self,
        workspace: WorkspaceClient,
        job_cluster: Callable[[JobLaunch], dict[str, Any]],
        submit_pipeline: SubmitPipeline,
        **retry: Any,
    ) -> None:
        super().__init__(workspace, job_cluster, **retry)
        self._submit_pipeline = submit_pipeline

    def submit(self, launch: JobLaunch) -> JobStatus:
        cluster = jobs.JobCluster.from_dict(self._job_cluster(launch)).new_cluster
        if cluster is None:
            raise JobError("the lease's realization has no job cluster")
        self._submit_pipeline(launch, cluster)
        found = self.find(launch)
        if found is None:
            tags = ", ".join(f"{key}={value}" for key, value in run_tags(launch).items())
            raise JobError(f"the pipeline's job was started, but no job run carries its cluster tags ({tags})")
        return found

    def find(self, launch: JobLaunch) -> JobStatus | None:
        """The attempt's job run: among the active ones first (one page where a workspace keeps years of
        finished runs), then among all."""
        tags = run_tags(launch)
        for active_only in (True, False):
            for run in self._call("list", partial(self._job_runs, active_only)):
                clusters = [c.new_cluster for c in run.job_clusters or [] if c.new_cluster is not None]
                if run.run_id is not None and any(_carries(cluster, tags) for cluster in clusters):
                    return self.status(str(run.run_id))
        return None

    def _job_runs(self, active_only: bool) -> list[jobs.BaseRun]:
        return list(
            self._workspace.jobs.list_runs(active_only=active_only, run_type=jobs.RunType.JOB_RUN, expand_tasks=True)
        )


def _carries(cluster: compute.ClusterSpec, tags: dict[str, str]) -> bool:
    custom = cluster.custom_tags or {}
    return all(custom.get(key) == value for key, value in tags.items())

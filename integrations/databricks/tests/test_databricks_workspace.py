"""Workspace lookups and stop through the real WorkspaceClient, over HTTP, against a kmock stand-in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kmock
import pytest
from databricks.sdk.service import compute
from respools_databricks import DatabricksBackend

from respools.model import Lease, PoolSpec

MakeLease = Callable[..., Lease]
MakePool = Callable[..., PoolSpec]


def api_calls(workspace_api: kmock.RawHandler) -> list[str]:
    """``METHOD /path`` of what the SDK asked, leaving out its host-metadata probe."""
    return [
        f"{request.method.value} {request.url.path}"
        for request in workspace_api
        if not request.url.path.startswith("/.well-known/")
    ]


def node_type(node_type_id: str, gpus: int, cores: int, **extra: Any) -> dict[str, Any]:
    return {
        "node_type_id": node_type_id,
        "num_gpus": gpus,
        "num_cores": cores,
        "memory_mb": cores * 4096,
        "description": node_type_id,
        "instance_type_id": node_type_id,
        "spark_version": "",
        "category": "GPU Accelerated" if gpus else "General Purpose",
        **extra,
    }


def test_runtime_and_node_types_come_from_the_workspace_once(
    workspace_api: kmock.RawHandler, backend: DatabricksBackend, make_lease: MakeLease, make_pool: MakePool
) -> None:
    workspace_api["get /api/2.1/clusters/spark-versions"] << {
        "versions": [
            {"key": "15.4.x-gpu-ml-scala2.12", "name": "15.4 LTS ML (includes Apache Spark 3.5.0, GPU, Scala 2.12)"},
            {"key": "14.3.x-gpu-ml-scala2.12", "name": "14.3 LTS ML (includes Apache Spark 3.5.0, GPU, Scala 2.12)"},
            {"key": "15.4.x-cpu-ml-scala2.12", "name": "15.4 LTS ML (includes Apache Spark 3.5.0, Scala 2.12)"},
            {"key": "16.1.x-gpu-ml-scala2.12", "name": "16.1 ML (includes Apache Spark 3.5.0, GPU, Scala 2.12)"},
        ]
    }
    workspace_api["get /api/2.1/clusters/list-node-types"] << {
        "node_types": [
            node_type("m5.xlarge", 0, 4),
            node_type("g4dn.xlarge", 1, 4, is_deprecated=True),
            node_type("g5.2xlarge", 1, 8),
            node_type("g5.xlarge", 1, 4),
            node_type("g5.12xlarge", 4, 48),
            node_type("p3.8xlarge", 4, 32, node_info={"status": ["NotAvailableInRegion"]}),
        ]
    }
    pool = make_pool(settings={"spark_version": None, "node_types": {}})

    one = backend.realize(make_lease({"gpu": 1}), pool).native["job_cluster"]["new_cluster"]
    four = backend.realize(make_lease({"gpu": 4}), pool).native["job_cluster"]["new_cluster"]

    assert (one["node_type_id"], one["spark_version"]) == ("g5.xlarge", "15.4.x-gpu-ml-scala2.12")
    assert four["node_type_id"] == "g5.12xlarge"
    assert api_calls(workspace_api) == [
        "GET /api/2.1/clusters/list-node-types",
        "GET /api/2.1/clusters/spark-versions",
    ]


@pytest.mark.parametrize(("listed", "confirmed"), [([], True), (["lease_other"], True), (["lease_7c1d"], False)])
def test_a_stop_is_confirmed_once_no_run_of_the_lease_is_active(
    workspace_api: kmock.RawHandler,
    backend: DatabricksBackend,
    make_lease: MakeLease,
    make_pool: MakePool,
    listed: list[str],
    confirmed: bool,
) -> None:
    runs = [
        {"run_id": 20 + n, "job_clusters": [{"job_cluster_key": "gpu", "new_cluster": cluster(tag)}]}
        for n, tag in enumerate(listed)
    ]
    workspace_api["get /api/2.2/jobs/runs/list"] << {"runs": runs}

    evidence = backend.confirm_stopped(make_lease({"gpu": 1}), make_pool())

    assert (evidence is not None) is confirmed
    (listing,) = [request for request in workspace_api if request.url.path == "/api/2.2/jobs/runs/list"]
    assert listing.params["active_only"] == "true"


def cluster(tag: str) -> dict[str, object]:
    return compute.ClusterSpec(custom_tags={"respools_lease_id": tag}).as_dict()


def test_stop_cancels_the_active_runs_tagged_with_the_lease(
    workspace_api: kmock.RawHandler, backend: DatabricksBackend, make_lease: MakeLease, make_pool: MakePool
) -> None:
    tagged_cluster = compute.ClusterSpec(custom_tags={"respools_lease_id": "lease_7c1d"}).as_dict()
    other_cluster = compute.ClusterSpec(custom_tags={"respools_lease_id": "lease_other"}).as_dict()
    workspace_api["get /api/2.2/jobs/runs/list"] << {
        "runs": [
            {"run_id": 11, "job_id": 1, "job_clusters": [{"job_cluster_key": "gpu", "new_cluster": tagged_cluster}]},
            {"run_id": 12, "job_id": 2, "tasks": [{"task_key": "t", "existing_cluster_id": "0415-gpu-shared"}]},
            {"run_id": 13, "job_id": 3, "tasks": [{"task_key": "t", "new_cluster": other_cluster}]},
            {"run_id": 14, "job_id": 2, "tasks": [{"task_key": "t", "existing_cluster_id": "0415-gpu-shared"}]},
        ]
    }
    jobs_by_id = {"1": {}, "2": {"respools_lease_id": "lease_7c1d"}, "3": {"respools_lease_id": "lease_other"}}
    workspace_api["get /api/2.2/jobs/get"] << (
        lambda request: {
            "job_id": int(request.params["job_id"]),
            "settings": {"tags": jobs_by_id[request.params["job_id"]]},
        }
    )
    workspace_api["post /api/2.2/jobs/runs/cancel"] << {}

    backend.stop(make_lease({"gpu": 1}), make_pool())

    listing = next(request for request in workspace_api if request.url.path == "/api/2.2/jobs/runs/list")
    assert listing.params["active_only"] == "true"
    assert listing.params["expand_tasks"] == "true"
    cancels = [request.data for request in workspace_api if request.url.path == "/api/2.2/jobs/runs/cancel"]
    assert cancels == [{"run_id": 11}, {"run_id": 12}, {"run_id": 14}]
    job_lookups = [request.params["job_id"] for request in workspace_api if request.url.path == "/api/2.2/jobs/get"]
    assert job_lookups == ["2", "3"]  # each job read once; run 11 matched on its cluster

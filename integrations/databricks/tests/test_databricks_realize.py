"""Leases → job clusters or shared-cluster Spark task amounts, read back through the SDK's dataclasses."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from databricks.sdk.service import compute, jobs
from respools_databricks import DatabricksBackend, attach_to_job

from respools.backends.protocol import BackendError
from respools.backends.registry import get_backend
from respools.model import Lease, PoolSpec

MakeLease = Callable[..., Lease]
MakePool = Callable[..., PoolSpec]


def step_job() -> jobs.JobSettings:
    """A job as an orchestrator builds it: a training task on an all-purpose cluster and a report task."""
    return jobs.JobSettings(
        name="train-pipeline",
        tags={"pipeline": "train"},
        tasks=[
            jobs.Task(
                task_key="train",
                existing_cluster_id="0101-cpu",
                spark_python_task=jobs.SparkPythonTask(python_file="train.py"),
            ),
            jobs.Task(task_key="report", spark_python_task=jobs.SparkPythonTask(python_file="report.py")),
        ],
    )


def test_whole_gpus_become_a_single_node_gpu_job_cluster(make_lease: MakeLease, make_pool: MakePool) -> None:
    realization = DatabricksBackend().realize(make_lease({"gpu": 4}), make_pool())

    cluster = realization.native["job_cluster"]
    assert jobs.JobCluster.from_dict(cluster).as_dict() == cluster  # every field is one the SDK knows
    spec = compute.ClusterSpec.from_dict(cluster["new_cluster"])
    assert (spec.node_type_id, spec.num_workers, spec.driver_node_type_id) == ("g5.12xlarge", 0, None)
    assert spec.spark_version == "15.4.x-gpu-ml-scala2.12"
    assert spec.spark_conf == {"spark.databricks.cluster.profile": "singleNode", "spark.master": "local[*, 4]"}
    assert spec.custom_tags == {"ResourceClass": "SingleNode", "respools_lease_id": "lease_7c1d"}
    assert realization.env == {"RESPOOLS_LEASE_ID": "lease_7c1d"}
    assert spec.spark_env_vars == realization.env


def test_more_gpus_than_one_node_has_become_workers_behind_a_cpu_driver(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    pool = make_pool(settings={"driver_node_type_id": "m5.xlarge"})
    realization = DatabricksBackend().realize(make_lease({"gpu": 16}), pool)

    spec = compute.ClusterSpec.from_dict(realization.native["job_cluster"]["new_cluster"])
    assert (spec.node_type_id, spec.num_workers, spec.driver_node_type_id) == ("g5.48xlarge", 2, "m5.xlarge")
    assert spec.spark_conf is None
    assert spec.custom_tags == {"respools_lease_id": "lease_7c1d"}


def test_a_count_no_node_type_carries_is_refused_naming_the_sizes(make_lease: MakeLease, make_pool: MakePool) -> None:
    with pytest.raises(BackendError, match=r"3 GPUs match no Databricks node type: single nodes carry 1, 4, 8 GPUs"):
        DatabricksBackend().realize(make_lease({"gpu": 3}), make_pool())
    pool = make_pool(settings={"node_types": {"8": "p4d.24xlarge"}, "driver_node_type_id": "m5.xlarge"})
    with pytest.raises(BackendError, match=r"single nodes carry 8 GPUs or multiples"):
        DatabricksBackend().realize(make_lease({"gpu": 12}), pool)


def test_a_fraction_is_a_spark_task_gpu_amount_on_the_shared_cluster(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    pool = make_pool(settings={"cluster_id": "0415-gpu-shared"})
    realization = DatabricksBackend().realize(make_lease({"gpu": 0.25}), pool)

    native = realization.native
    assert native["existing_cluster_id"] == "0415-gpu-shared"
    conf = {"spark_conf": native["spark_conf"]}
    assert compute.ClusterSpec.from_dict(conf).as_dict() == conf
    assert native["spark_conf"] == {"spark.task.resource.gpu.amount": "0.25"}
    assert native["task_resource_requests"] == {"gpu": 0.25}
    assert realization.env == {"RESPOOLS_LEASE_ID": "lease_7c1d", "RESPOOLS_GPU_FRACTION": "0.25"}
    assert "4 tasks per GPU" in realization.notes[0]


def test_a_fraction_spark_cannot_share_is_refused(make_lease: MakeLease, make_pool: MakePool) -> None:
    pool = make_pool(settings={"cluster_id": "0415-gpu-shared"})
    with pytest.raises(BackendError, match=r"amount <= 0.5"):
        DatabricksBackend().realize(make_lease({"gpu": 0.75}), pool)
    with pytest.raises(BackendError, match=r"neither whole GPUs nor one fraction"):
        DatabricksBackend().realize(make_lease({"gpu": 1.5}), pool)


def test_without_a_shared_cluster_fractions_are_refused_naming_what_the_pool_supports(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    backend = DatabricksBackend()
    assert backend.effective_forms(make_pool()) == {"whole"}
    with pytest.raises(BackendError, match=r"cannot express fraction; it supports whole$"):
        backend.realize(make_lease({"gpu": 0.5}), make_pool())
    with pytest.raises(BackendError, match=r"set settings.cluster_id"):
        backend.validate_pool(make_pool(forms=["fraction"]))


def test_mig_is_refused_at_pool_definition_and_at_realize(make_lease: MakeLease, make_pool: MakePool) -> None:
    backend = DatabricksBackend()
    with pytest.raises(BackendError, match=r"cannot express mig; it supports fraction, whole"):
        backend.validate_pool(make_pool(forms=["whole", "mig"]))
    with pytest.raises(BackendError, match=r"cannot express mig; it supports fraction, whole"):
        backend.validate_pool(make_pool(capacity={"mig.1g.10gb": 7}))
    pool = make_pool(settings={"cluster_id": "0415-gpu-shared"})
    with pytest.raises(BackendError, match=r"cannot express mig; it supports fraction, whole$"):
        backend.realize(make_lease({"mig.1g.10gb": 1}), pool)


def test_pool_definitions_need_a_gpu_ml_runtime(make_pool: MakePool) -> None:
    DatabricksBackend().validate_pool(make_pool(settings={"spark_version": "16.4.x-gpu-ml-scala2.13"}))
    with pytest.raises(BackendError, match=r"not a GPU ML runtime"):
        DatabricksBackend().validate_pool(make_pool(settings={"spark_version": "15.4.x-cpu-ml-scala2.12"}))
    with pytest.raises(BackendError, match=r"cluster: Extra inputs are not permitted"):
        DatabricksBackend().validate_pool(make_pool(settings={"cluster": "0415"}))


def test_attaching_a_job_cluster_moves_the_chosen_tasks_onto_it(make_lease: MakeLease, make_pool: MakePool) -> None:
    native = DatabricksBackend().realize(make_lease({"gpu": 1}), make_pool()).native

    job = attach_to_job(step_job(), native, task_keys={"train"})

    train, report = job.tasks or []
    assert (train.job_cluster_key, train.existing_cluster_id) == ("respools_lease_7c1d", None)
    assert report.job_cluster_key is None
    assert [cluster.job_cluster_key for cluster in job.job_clusters or []] == ["respools_lease_7c1d"]
    assert job.tags == {"pipeline": "train", "respools_lease_id": "lease_7c1d"}
    assert jobs.JobSettings.from_dict(job.as_dict()).as_dict() == job.as_dict()
    assert step_job().tasks[0].existing_cluster_id == "0101-cpu"  # type: ignore[index]


def test_attaching_a_fraction_moves_the_tasks_onto_the_shared_cluster(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    pool = make_pool(settings={"cluster_id": "0415-gpu-shared"})
    native = DatabricksBackend().realize(make_lease({"gpu": 0.5}), pool).native

    job = attach_to_job(step_job(), native)

    assert [task.existing_cluster_id for task in job.tasks or []] == ["0415-gpu-shared"] * 2
    assert not job.job_clusters
    assert (job.tags or {})["respools_lease_id"] == "lease_7c1d"
    with pytest.raises(BackendError, match=r"no task"):
        attach_to_job(step_job(), native, task_keys={"deploy"})


def test_the_entry_point_names_this_backend() -> None:
    assert isinstance(get_backend("databricks"), DatabricksBackend)

"""Leases → CustomJob fragments, merged into a step's job and read back through aiplatform_v1's types."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from google.cloud import aiplatform_v1
from respools_vertex import VertexBackend, apply_to_custom_job

from respools.backends.protocol import BackendError
from respools.backends.registry import get_backend
from respools.model import Lease, PoolSpec

MakeLease = Callable[..., Lease]
MakePool = Callable[..., PoolSpec]


def step_job() -> aiplatform_v1.CustomJob:
    """A job as an orchestrator builds it: container, CPU defaults, and a parameter-server pool."""
    container = aiplatform_v1.ContainerSpec(
        image_uri="us-docker.pkg.dev/ml/train:1",
        command=["python", "train.py"],
        env=[aiplatform_v1.EnvVar(name="LOG_LEVEL", value="info"), aiplatform_v1.EnvVar(name="RESPOOLS_LEASE_ID")],
    )
    return aiplatform_v1.CustomJob(
        display_name="train-step",
        labels={"pipeline": "train"},
        job_spec=aiplatform_v1.CustomJobSpec(
            worker_pool_specs=[
                aiplatform_v1.WorkerPoolSpec(
                    container_spec=container,
                    machine_spec=aiplatform_v1.MachineSpec(machine_type="n1-standard-4"),
                    replica_count=1,
                ),
                aiplatform_v1.WorkerPoolSpec(
                    container_spec=container,
                    machine_spec=aiplatform_v1.MachineSpec(machine_type="n1-highmem-8"),
                    replica_count=2,
                ),
            ]
        ),
    )


def test_whole_gpus_become_the_chief_pools_machine_spec(make_lease: MakeLease, make_pool: MakePool) -> None:
    realization = VertexBackend().realize(make_lease({"gpu": 2}), make_pool())

    job = apply_to_custom_job(step_job(), realization.native["custom_job"], realization.env)

    chief, servers = job.job_spec.worker_pool_specs
    assert chief.machine_spec == aiplatform_v1.MachineSpec(
        machine_type="a2-highgpu-2g",
        accelerator_type=aiplatform_v1.AcceleratorType.NVIDIA_TESLA_A100,
        accelerator_count=2,
    )
    assert chief.container_spec.image_uri == "us-docker.pkg.dev/ml/train:1"
    chief_env = [(var.name, var.value) for var in chief.container_spec.env]
    assert chief_env == [("LOG_LEVEL", "info"), ("RESPOOLS_LEASE_ID", "lease_1f2e")]
    assert [var.value for var in servers.container_spec.env] == ["info", ""]
    assert servers.machine_spec.machine_type == "n1-highmem-8"  # the step's other pools are its own
    assert dict(job.labels) == {"pipeline": "train", "respools-lease-id": "lease_1f2e"}
    assert realization.native["location"] == "projects/ml-prod/locations/us-central1"
    assert realization.env == {"RESPOOLS_LEASE_ID": "lease_1f2e"}
    # the caller's job is untouched
    assert step_job().job_spec.worker_pool_specs[0].machine_spec.machine_type == "n1-standard-4"


def test_the_fragment_is_the_worker_pool_specs_form_the_aiplatform_sdk_takes(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    pool = make_pool(settings={"accelerator_type": None}, gpu_class="l4")
    fragment = VertexBackend().realize(make_lease({"gpu": 4}), pool).native["custom_job"]

    (spec,) = fragment["job_spec"]["worker_pool_specs"]
    assert spec == {
        "machine_spec": {"machine_type": "g2-standard-48", "accelerator_type": "NVIDIA_L4", "accelerator_count": 4},
        "replica_count": 1,
    }
    assert aiplatform_v1.WorkerPoolSpec(spec).machine_spec.accelerator_type == aiplatform_v1.AcceleratorType.NVIDIA_L4


def test_spot_pools_ask_for_the_spot_strategy(make_lease: MakeLease, make_pool: MakePool) -> None:
    pool = make_pool(settings={"accelerator_type": "NVIDIA_H200_141GB", "spot": True})
    realization = VertexBackend().realize(make_lease({"gpu": 8}), pool)

    job = apply_to_custom_job(step_job(), realization.native["custom_job"])

    assert job.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
    assert job.job_spec.worker_pool_specs[0].machine_spec.machine_type == "a3-ultragpu-8g"


def test_a_machine_type_from_settings_is_used_for_its_count(make_lease: MakeLease, make_pool: MakePool) -> None:
    pool = make_pool(settings={"accelerator_type": "NVIDIA_TESLA_T4", "machine_types": {"1": "n1-highmem-16"}})
    VertexBackend().validate_pool(pool)

    one = VertexBackend().realize(make_lease({"gpu": 1}), pool).native["custom_job"]
    two = VertexBackend().realize(make_lease({"gpu": 2}), pool).native["custom_job"]

    assert one["job_spec"]["worker_pool_specs"][0]["machine_spec"]["machine_type"] == "n1-highmem-16"
    assert two["job_spec"]["worker_pool_specs"][0]["machine_spec"]["machine_type"] == "n1-standard-16"


def test_a_count_that_matches_no_machine_type_is_refused_naming_the_valid_counts(
    make_lease: MakeLease, make_pool: MakePool
) -> None:
    with pytest.raises(BackendError, match=r"3 x NVIDIA_TESLA_A100 .* valid counts are 1, 2, 4, 8, 16"):
        VertexBackend().realize(make_lease({"gpu": 3}), make_pool())


@pytest.mark.parametrize(
    ("resources", "form"),
    [({"gpu": 0.5}, "fraction"), ({"gpu": 2.5}, "fraction"), ({"mig.3g.40gb": 1}, "mig")],
)
def test_fractions_and_mig_leases_are_refused_saying_vertex_supports_whole_gpus(
    make_lease: MakeLease, make_pool: MakePool, resources: dict[str, float], form: str
) -> None:
    with pytest.raises(BackendError, match=f"cannot express {form} .*it supports whole$"):
        VertexBackend().realize(make_lease(resources), make_pool())


def test_pools_asking_for_what_vertex_cannot_express_are_refused_at_definition(make_pool: MakePool) -> None:
    backend = VertexBackend()
    backend.validate_pool(make_pool(capacity={"gpu": 16}))
    with pytest.raises(BackendError, match=r"cannot express fraction; it supports whole"):
        backend.validate_pool(make_pool(forms=["whole", "fraction"]))
    with pytest.raises(BackendError, match=r"cannot express mig; it supports whole"):
        backend.validate_pool(make_pool(forms=["mig"]))
    with pytest.raises(BackendError, match=r"cannot express mig \(mig.1g.10gb\)"):
        backend.validate_pool(make_pool(capacity={"mig.1g.10gb": 7}))
    with pytest.raises(BackendError, match=r"cannot express fraction"):
        backend.validate_pool(make_pool(capacity={"gpu": 2.5}))
    with pytest.raises(BackendError, match=r"no inventory"):
        backend.validate_pool(make_pool(inventory=[]))
    assert backend.effective_forms(make_pool()) == {"whole"}


def test_pool_definitions_name_a_known_accelerator_and_valid_machine_types(make_pool: MakePool) -> None:
    backend = VertexBackend()
    backend.validate_pool(make_pool(settings={"accelerator_type": None}, gpu_class="a100-80gb"))
    with pytest.raises(BackendError, match=r"not a Vertex accelerator"):
        backend.validate_pool(make_pool(settings={"accelerator_type": "A100-PCIE"}))
    with pytest.raises(BackendError, match=r"needs its accelerator"):
        backend.validate_pool(make_pool(settings={"accelerator_type": None}))
    with pytest.raises(BackendError, match=r"valid counts are 1, 2, 4, 8$"):
        backend.validate_pool(make_pool(settings={"accelerator_type": "h100", "machine_types": {"3": "a3-highgpu-3g"}}))
    with pytest.raises(BackendError, match=r"machine_type: Extra inputs"):
        backend.validate_pool(make_pool(settings={"machine_type": "a2-highgpu-1g"}))


def test_the_entry_point_names_this_backend() -> None:
    assert isinstance(get_backend("vertex"), VertexBackend)

"""ZenML's ``ResourceSettings`` (0.97–0.98 fields) mapped to respools requests, and the step decorator's
records, resolved the way the pooled orchestrators resolve them."""

from __future__ import annotations

from typing import Any

import pytest
import respools_zenml
from respools_zenml.demand import DemandError, map_resource_settings
from respools_zenml.options import EXTRA_KEY
from respools_zenml.resolve import step_demand
from respools_zenml.settings import RespoolsSettings
from zenml import step
from zenml.config import ResourceSettings
from zenml.config.resource_settings import PoolResourceDemand
from zenml.config.retry_config import StepRetryConfig
from zenml.config.step_configurations import StepConfiguration
from zenml.enums import ResourceRequestReclaimTolerance
from zenml.steps import BaseStep


def _configuration(step_instance: BaseStep) -> StepConfiguration:
    """The configuration the compiler would put into the snapshot (settings and extra as stored)."""
    config = step_instance.configuration
    return StepConfiguration.model_validate(
        {**config.model_dump(), "name": step_instance.name, "caching_parameters": {}, "external_input_artifacts": {}}
    )


def test_typed_fields_map_to_respools_keys() -> None:
    mapped = map_resource_settings(ResourceSettings(gpu_count=2, cpu_count=1.5, memory="3GiB", gpu_class="a100"))
    assert mapped.resources == {"gpu": 2, "mcpu": 1500, "memory_mb": 3222}
    assert mapped.gpu_class == "a100"
    assert mapped.preemptible is None


def test_memory_is_counted_in_decimal_megabytes_rounded_up_as_zenml_documents() -> None:
    assert map_resource_settings(ResourceSettings(memory="16GiB")).resources == {"memory_mb": 17180}
    assert map_resource_settings(ResourceSettings(memory="1GB")).resources == {"memory_mb": 1000}
    assert map_resource_settings(ResourceSettings(memory="1000MiB")).resources == {"memory_mb": 1049}
    assert map_resource_settings(ResourceSettings(memory="512KiB")).resources == {"memory_mb": 1}


def test_pool_resources_shorthands_and_demands() -> None:
    assert map_resource_settings(ResourceSettings(resources="tensorrt_sessions")).resources == {"tensorrt_sessions": 1}
    assert map_resource_settings(ResourceSettings(resources={"mig.3g.40gb": 2})).resources == {"mig.3g.40gb": 2}
    demands = [
        PoolResourceDemand(kind="gpu", quantity=1, class_name="h100", resource_selector={"zone": "eu"}),
        PoolResourceDemand(kind="cpu", quantity=500, unit="mCPU"),
        PoolResourceDemand(kind="memory", quantity=2, unit="GiB"),
        PoolResourceDemand(kind="mig", name="1g.10gb", quantity=1),
    ]
    mapped = map_resource_settings(ResourceSettings(resources=demands))
    assert mapped.resources == {"gpu": 1, "mcpu": 500, "memory_mb": 2148, "mig.1g.10gb": 1}
    assert mapped.gpu_class == "h100"
    assert mapped.selectors == {"zone": "eu"}


def test_legacy_pool_resources_input_is_read() -> None:
    assert map_resource_settings(ResourceSettings(pool_resources={"tokens": 5})).resources == {"tokens": 5}


@pytest.mark.parametrize(
    ("fields", "preemptible"),
    [
        ({"reclaim_tolerance": ResourceRequestReclaimTolerance.NONE}, False),
        ({"reclaim_tolerance": "coordinated"}, True),
        ({"reclaim_tolerance": "any"}, True),
        ({"preemptible": True}, True),
        ({"preemptible": False}, False),
        ({}, None),
    ],
)
def test_reclaim_tolerance_and_legacy_preemptible(fields: dict[str, Any], preemptible: bool | None) -> None:
    assert map_resource_settings(ResourceSettings(gpu_count=1, **fields)).preemptible is preemptible


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (ResourceSettings(gpu_count=1, resources={"gpu": 1}), "gpu is given both"),
        (ResourceSettings(resources={"Bad Key": 1}), "not a respools resource key"),
        (ResourceSettings(resources=[PoolResourceDemand(kind="cpu", quantity=1, unit="vcpu")]), "CPU unit"),
        (
            ResourceSettings(resources=[PoolResourceDemand(name="x", quantity=1, resource_selector={"a": [1]})]),
            "string or number",
        ),
        (
            ResourceSettings(
                gpu_count=1, gpu_class="a100", resources=[PoolResourceDemand(name="x", quantity=1, class_name="h100")]
            ),
            "GPU class",
        ),
    ],
)
def test_demands_respools_cannot_express_are_refused(settings: ResourceSettings, message: str) -> None:
    with pytest.raises(DemandError, match=message):
        map_resource_settings(settings)


def test_plain_zenml_step_with_resource_settings_is_pooled_and_preemptible_by_default() -> None:
    @step(settings={"resources": ResourceSettings(gpu_count=1)}, retry=StepRetryConfig(max_retries=2))
    def train() -> None: ...

    demand = step_demand(_configuration(train), RespoolsSettings(pool="gpus", priority=3))
    assert demand is not None
    assert demand.resources == {"gpu": 1}
    assert demand.preemptible is True  # ZenML's default for isolated steps: reclaim tolerance "any"
    assert demand.priority == 3
    assert demand.pools == ["gpus"]
    assert demand.max_retries == 2


def test_steps_without_resources_run_without_a_lease_unless_asked() -> None:
    @step
    def prepare() -> None: ...

    assert step_demand(_configuration(prepare), RespoolsSettings()) is None
    demand = step_demand(_configuration(prepare), RespoolsSettings(pool_all_steps=True))
    assert demand is not None and demand.resources == {"step_run": 1}


def test_decorator_records_options_and_zenml_settings() -> None:
    @respools_zenml.step(
        resources=ResourceSettings(gpu_count=1, memory="1GiB", reclaim_tolerance="none"),
        priority=7,
        max_retries=3,
        pool="a100",
        labels={"team": "vision"},
        enable_cache=False,
    )
    def train(x: int) -> int:
        return x

    config = _configuration(train)
    assert config.retry is not None and config.retry.max_retries == 3
    assert config.enable_cache is False
    demand = step_demand(config, RespoolsSettings(priority=1, pool="other", labels={"cost": "ml"}))
    assert demand is not None
    assert demand.resources == {"gpu": 1, "memory_mb": 1074}
    assert (demand.priority, demand.pools, demand.max_retries, demand.preemptible) == (7, ["a100"], 3, False)
    assert demand.labels == {"cost": "ml", "team": "vision"}
    assert train.entrypoint(2) == 2  # still the user's function


def test_decorator_vector_and_shorthands() -> None:
    @respools_zenml.step(resources={"tensorrt_sessions": 2}, gpu=0.25, preemptible=True)
    def serve() -> None: ...

    demand = step_demand(_configuration(serve), RespoolsSettings(preemptible=False))
    assert demand is not None
    assert demand.resources == {"gpu": 0.25, "tensorrt_sessions": 2}
    assert demand.preemptible is True


def test_bare_decorator_asks_for_a_step_slot() -> None:
    @respools_zenml.step
    def anything() -> None: ...

    assert _configuration(anything).extra[EXTRA_KEY] == {}
    demand = step_demand(_configuration(anything), RespoolsSettings())
    assert demand is not None and demand.resources == {"step_run": 1}


def test_orchestrator_default_preemptible_applies_when_the_step_is_silent() -> None:
    @respools_zenml.step(gpu=1)
    def train() -> None: ...

    demand = step_demand(_configuration(train), RespoolsSettings(preemptible=False))
    assert demand is not None and demand.preemptible is False


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"resources": {"gpu": 1}, "gpu": 2}, "given both"),
        ({"gpu": 1.0001}, "resolution"),
        ({"max_retries": 1, "retry": StepRetryConfig(max_retries=2)}, "give one number"),
        ({"resources": ResourceSettings(gpu_count=1), "settings": {"resources": ResourceSettings()}}, "give one"),
        ({"extra": {EXTRA_KEY: {}}}, "written by respools_zenml.step"),
    ],
)
def test_decorator_refuses_contradictions(options: dict[str, Any], message: str) -> None:
    with pytest.raises(DemandError, match=message):
        respools_zenml.step(**options)


def test_vector_and_resource_settings_clash_is_refused_at_resolution() -> None:
    @respools_zenml.step(gpu=1, settings={"resources": ResourceSettings(gpu_count=1)})
    def train() -> None: ...

    with pytest.raises(DemandError, match="gpu is given both"):
        step_demand(_configuration(train), RespoolsSettings())


@pytest.mark.parametrize(
    ("tolerance", "preemptible", "stop_at_notice"),
    [("none", False, False), ("coordinated", True, False), ("any", True, True)],
)
def test_reclaim_tolerance_maps_to_preemptibility_and_grace(
    tolerance: str, preemptible: bool, stop_at_notice: bool
) -> None:
    @step(settings={"resources": ResourceSettings(gpu_count=1, reclaim_tolerance=tolerance)})
    def train() -> None: ...

    demand = step_demand(_configuration(train), RespoolsSettings())
    assert demand is not None
    assert (demand.preemptible, demand.stop_at_notice) == (preemptible, stop_at_notice)


def test_a_silent_step_is_preemptible_with_the_pools_grace() -> None:
    @step(settings={"resources": ResourceSettings(gpu_count=1)})
    def train() -> None: ...

    demand = step_demand(_configuration(train), RespoolsSettings())
    assert demand is not None and (demand.preemptible, demand.stop_at_notice) == (True, False)


def test_wait_and_initialization_windows_come_from_resource_settings() -> None:
    @step(
        settings={
            "resources": ResourceSettings(
                gpu_count=1, allocation_wait_timeout_seconds=30, initialization_lease_seconds=90
            )
        }
    )
    def train() -> None: ...

    demand = step_demand(_configuration(train), RespoolsSettings())
    assert demand is not None
    assert (demand.allocation_wait_timeout_s, demand.initialization_lease_s) == (30, 90)

    @step(settings={"resources": ResourceSettings(gpu_count=1)})
    def silent() -> None: ...

    demand = step_demand(_configuration(silent), RespoolsSettings())
    assert demand is not None and (demand.allocation_wait_timeout_s, demand.initialization_lease_s) == (3600, 3600)


def test_a_request_names_the_run_it_serves_and_its_dashboard_page() -> None:
    from respools_zenml.identity import StepIdentity

    identity = StepIdentity("orch-1", "train", "pipe", run_id="4f1c", run_url="https://zenml.example/runs/4f1c")
    labels = identity.labels()
    assert labels["zenml_run_id"] == "4f1c" and labels["run_url"] == "https://zenml.example/runs/4f1c"
    assert "run_url" not in StepIdentity("orch-1", "train", "pipe").labels()

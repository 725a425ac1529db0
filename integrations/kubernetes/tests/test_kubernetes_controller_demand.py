"""What a workload asks for, read from its pod template as the API serves it."""

from __future__ import annotations

from typing import Any

import pytest
from respools_kubernetes.controller.demand import BadDemand, template_resources


def template(
    *limits: dict[str, str], init: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": f"c{i}", "image": "x", "resources": {"limits": lim}} for i, lim in enumerate(limits)]
    }
    if init is not None:
        spec["initContainers"] = [{"name": "init", "image": "x", "resources": {"requests": init}}]
    return {"metadata": {"annotations": annotations or {}}, "spec": spec}


def test_whole_gpus_add_up_over_containers_and_an_init_container_counts_alone() -> None:
    assert template_resources(template({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1", "cpu": "4"})) == {"gpu": 3}
    assert template_resources(template({"nvidia.com/gpu": "1"}, init={"nvidia.com/gpu": "4"})) == {"gpu": 4}


def test_mig_slices_become_mig_keys() -> None:
    found = template_resources(template({"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-1g.10gb": "2"}))
    assert found == {"mig.3g.40gb": 1, "mig.1g.10gb": 2}


def test_a_fraction_comes_from_the_annotation_with_its_memory() -> None:
    found = template_resources(
        template({"cpu": "1"}, annotations={"respools.io/gpu-fraction": "0.25", "respools.io/gpu-memory-mb": "20000"})
    )
    assert found == {"gpu": 0.25, "gpu_memory_mb": 20000}


def test_a_template_without_devices_is_not_a_gpu_workload() -> None:
    assert template_resources(template({"cpu": "2", "memory": "1Gi"})) == {}


@pytest.mark.parametrize(
    ("tpl", "message"),
    [
        (template({"nvidia.com/gpu": "1.5"}), "whole number of devices"),
        (template({"nvidia.com/gpu": "1"}, annotations={"respools.io/gpu-fraction": "0.5"}), "one or the other"),
        (template({}, annotations={"respools.io/gpu-fraction": "1.5"}), "between 0 and 1"),
        (template({}, annotations={"respools.io/gpu-fraction": "half"}), "not a number"),
    ],
)
def test_shapes_no_lease_can_give_are_refused_with_what_to_change(tpl: dict[str, Any], message: str) -> None:
    with pytest.raises(BadDemand, match=message):
        template_resources(tpl)

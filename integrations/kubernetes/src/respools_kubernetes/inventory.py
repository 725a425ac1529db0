"""Node objects → respools hosts.

A Node tells how many GPU devices it can allocate (``nvidia.com/gpu``, ``nvidia.com/mig-<profile>``) and,
where NVIDIA's GPU feature discovery runs, what they are (``nvidia.com/gpu.product``, ``.memory``, ``.count``).
It does not name the devices, so GPUs get stable synthetic ids (``<node>/gpu-<i>``) unless HAMi publishes
its device list (``hami.io/node-nvidia-register``), which carries the real UUIDs that HAMi pinning needs.
HAMi also inflates ``nvidia.com/gpu`` by its split count, so where its list exists it is the only source.

Node objects do not say which physical GPU a MIG slice lives on either. Slices are therefore hung on
synthetic MIG-enabled parents: under the *mixed* strategy one per physical GPU not allocatable whole
(``gpu.count`` minus allocatable ``nvidia.com/gpu``), round-robin; under *single*, where the labels describe
slices only, one parent per node. The device plugin picks the actual slice, so this layout only has to
count right.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from respools.backends.protocol import BackendError
from respools.model import Gpu, Host, MigInstance
from respools_kubernetes.fragment import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from respools_kubernetes.labels import (
    COUNT_LABEL,
    HAMI_REGISTER_ANNOTATION,
    MEMORY_LABEL,
    MIG_STRATEGY_LABEL,
    PRODUCT_LABEL,
    split_mig_product,
)
from respools_kubernetes.settings import KubernetesSettings

UNKNOWN_MODEL = "unknown"
_SIZE_IN_NAME_RE = re.compile(r"(\d+)\s*GB", re.IGNORECASE)


def host_from_node(node: Any, settings: KubernetesSettings) -> Host | None:
    """The node (a ``kubernetes.client.V1Node``) as a host, or None when it has no GPUs to offer."""
    name: str = node.metadata.name
    labels: dict[str, str] = dict(node.metadata.labels or {})
    annotations: Mapping[str, str] = node.metadata.annotations or {}
    allocatable: Mapping[str, str] = (node.status.allocatable if node.status else None) or {}
    registered = annotations.get(HAMI_REGISTER_ANNOTATION)
    gpus = _hami_gpus(name, registered) if registered is not None else _plugin_gpus(name, labels, allocatable, settings)
    if not gpus:
        return None
    try:
        return Host(name=name, gpus=gpus, labels=labels)
    except ValidationError as exc:
        raise BackendError(f"node {name!r} cannot be a respools host: {exc.errors()[0]['msg']}") from None


def _hami_gpus(node: str, registered: str) -> list[Gpu]:
    try:
        devices = json.loads(registered)
    except json.JSONDecodeError:
        raise BackendError(
            f"node {node!r}: {HAMI_REGISTER_ANNOTATION} is not the JSON device list of HAMi >= 2.4"
        ) from None
    gpus = []
    for position, device in enumerate(devices):
        if not device.get("health", True):
            continue
        gpus.append(
            Gpu(
                uuid=device["id"],
                index=int(device.get("index", position)),
                model=device.get("type") or UNKNOWN_MODEL,
                memory_mb=int(device["devmem"]),
                attributes={"source": "hami"},
            )
        )
    return gpus


def _plugin_gpus(
    node: str, labels: Mapping[str, str], allocatable: Mapping[str, str], settings: KubernetesSettings
) -> list[Gpu]:
    product = labels.get(PRODUCT_LABEL)
    allocatable_gpus = _count(allocatable.get(GPU_RESOURCE))
    count_label = _count(labels.get(COUNT_LABEL)) if COUNT_LABEL in labels else None
    memory_label = _count(labels.get(MEMORY_LABEL)) or None
    model, single_profile = split_mig_product(product) if product else (UNKNOWN_MODEL, None)
    attributes = {"source": "node-labels", **({"product": product} if product else {})}

    if labels.get(MIG_STRATEGY_LABEL, settings.mig_strategy) == "single" and single_profile is not None:
        # Every nvidia.com/gpu here is a slice; gpu.memory is the slice's memory.
        if not allocatable_gpus:
            return []
        slice_total = memory_label * allocatable_gpus if memory_label else None
        memory = _memory_mb(node, [_size_in_name(model), slice_total], settings)
        slices = {single_profile: allocatable_gpus}
        return _mig_parents(node, model, memory, slices, parents=1, first_index=0, attributes=attributes)

    whole = min(allocatable_gpus, count_label) if count_label is not None else allocatable_gpus
    slices = {
        key[len(MIG_RESOURCE_PREFIX) :]: _count(value)
        for key, value in sorted(allocatable.items())
        if key.startswith(MIG_RESOURCE_PREFIX) and _count(value) > 0
    }
    if not whole and not slices:
        return []
    memory = _memory_mb(node, [memory_label, _size_in_name(model)], settings)
    gpus = [
        Gpu(uuid=f"{node}/gpu-{i}", index=i, model=model, memory_mb=memory, attributes=attributes) for i in range(whole)
    ]
    if slices:
        parents = max(1, (count_label or 0) - whole)
        gpus += _mig_parents(node, model, memory, slices, parents=parents, first_index=whole, attributes=attributes)
    return gpus


def _mig_parents(
    node: str,
    model: str,
    memory_mb: int,
    slices: Mapping[str, int],
    *,
    parents: int,
    first_index: int,
    attributes: Mapping[str, str],
) -> list[Gpu]:
    instances: list[list[MigInstance]] = [[] for _ in range(parents)]
    position = 0
    for profile, count in slices.items():
        for n in range(count):
            parent = position % parents
            uuid = f"{node}/mig-gpu-{first_index + parent}/{profile}-{n}"
            instances[parent].append(MigInstance(uuid=uuid, profile=profile))
            position += 1
    return [
        Gpu(
            uuid=f"{node}/mig-gpu-{first_index + i}",
            index=first_index + i,
            model=model,
            memory_mb=memory_mb,
            mig_enabled=True,
            mig_instances=instances[i],
            attributes=dict(attributes),
        )
        for i in range(parents)
    ]


def _memory_mb(node: str, candidates: list[int | None], settings: KubernetesSettings) -> int:
    """The first known of ``candidates`` (labels, product name), else the pool setting, else an error."""
    for candidate in candidates:
        if candidate:
            return candidate
    if settings.gpu_memory_mb:
        return settings.gpu_memory_mb
    raise BackendError(
        f"node {node!r}: GPU memory unknown (no {MEMORY_LABEL} label, no size in the product name); "
        "run NVIDIA GPU feature discovery or set the pool setting gpu_memory_mb"
    )


def _size_in_name(model: str) -> int | None:
    """``A100-SXM4-80GB`` → 81920 MiB; None where the name carries no size."""
    size = _SIZE_IN_NAME_RE.search(model)
    return int(size.group(1)) * 1024 if size else None


def _count(value: str | None) -> int:
    """A device count from an allocatable quantity or a label; device plugins only use plain integers."""
    if value is None:
        return 0
    try:
        return max(0, int(value))
    except ValueError:
        return 0

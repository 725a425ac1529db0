"""Which node type carries how many GPUs, and the cluster shape a whole-GPU lease becomes.

The SDK's ``select_node_type(min_gpus=N)`` returns the smallest node with *at least* N GPUs; a lease of N
GPUs must get exactly N (more would be GPUs nobody accounts for), so the same ordering (not deprecated,
fewest cores, least memory) is applied per exact GPU count. A lease is a single-node cluster where a node
type has its count, else workers of the largest node type dividing it, behind a CPU driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from databricks.sdk.service.compute import CloudProviderNodeStatus, NodeType

from respools.backends.protocol import BackendError

_UNAVAILABLE = {CloudProviderNodeStatus.NOT_AVAILABLE_IN_REGION, CloudProviderNodeStatus.NOT_ENABLED_ON_SUBSCRIPTION}


@dataclass(frozen=True)
class ClusterShape:
    node_type_id: str
    num_workers: int
    driver_node_type_id: str | None = None

    @property
    def single_node(self) -> bool:
        return self.num_workers == 0


def gpu_node_types(node_types: Iterable[NodeType]) -> dict[int, str]:
    """GPU count → the smallest usable node type with exactly that many GPUs."""
    usable = [nt for nt in node_types if nt.num_gpus and not nt.is_deprecated and not nt.is_hidden and _available(nt)]
    chosen: dict[int, str] = {}
    for nt in sorted(usable, key=lambda nt: (nt.num_cores or 0, nt.memory_mb or 0, nt.node_type_id)):
        chosen.setdefault(int(nt.num_gpus or 0), nt.node_type_id)
    return dict(sorted(chosen.items()))


def _available(node_type: NodeType) -> bool:
    statuses = node_type.node_info.status if node_type.node_info and node_type.node_info.status else []
    return not any(status in _UNAVAILABLE for status in statuses)


def cluster_shape(count: int, node_types: Mapping[int, str], driver_node_type_id: str | None) -> ClusterShape:
    """The cluster for ``count`` GPUs, or a refusal naming the counts that fit."""
    if count in node_types:
        return ClusterShape(node_type_id=node_types[count], num_workers=0)
    if driver_node_type_id is not None:
        for gpus in sorted(node_types, reverse=True):
            if count % gpus == 0:
                return ClusterShape(
                    node_types[gpus], num_workers=count // gpus, driver_node_type_id=driver_node_type_id
                )
    sizes = ", ".join(str(n) for n in sorted(node_types)) or "none"
    multi = (
        "or multiples of those on several workers"
        if driver_node_type_id
        else "(set settings.driver_node_type_id to a CPU node type to allow multiples on several workers)"
    )
    raise BackendError(f"{count} GPUs match no Databricks node type: single nodes carry {sizes} GPUs {multi}")

"""The cluster's Nodes as the pools' inventory: each ``kubernetes`` pool with a ``node_selector`` gets one
host report per matching GPU node, through the service's host API (``PUT /v1/pools/{pool}/hosts/{host}``,
as the local agent reports its machine). A node that goes NotReady or is cordoned is taken out of the
pool (its report deleted) and comes back with its next healthy look; reports are renewed well within their
TTL, so a controller that dies takes its nodes out of the pools after ``host_ttl_s``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from respools import ApiError, Client
from respools.backends.protocol import BackendError
from respools.model import Host, Pool, PoolSpec
from respools_kubernetes.api_json import from_api_json
from respools_kubernetes.inventory import host_from_node
from respools_kubernetes.settings import settings_of

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_CORDON_TAINT = "node.kubernetes.io/unschedulable"


def schedulable(node: Obj) -> bool:
    """Ready and not cordoned."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    if any(taint.get("key") == _CORDON_TAINT for taint in spec.get("taints") or []):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = [c for c in conditions if c.get("type") == "Ready"]
    return not ready or ready[0].get("status") == "True"


def _matches(node: Obj, selector: Mapping[str, str]) -> bool:
    node_labels = (node.get("metadata") or {}).get("labels") or {}
    return all(node_labels.get(key) == value for key, value in selector.items())


class InventorySync:
    def __init__(self, client: Client, nodes: Callable[[], list[Obj]], host_ttl_s: float) -> None:
        self._client = client
        self._nodes = nodes
        self._ttl_s = host_ttl_s
        self._reported: dict[tuple[str, str], tuple[Host, float]] = {}
        """(pool, host) → what was last reported and when (monotonic)."""
        self._skipped: set[tuple[str, str]] = set()

    def sync(self) -> None:
        for pool in self._pools():
            try:
                self._sync_pool(pool)
            except ApiError as exc:
                log.warning("inventory of pool %s: %s", pool.name, exc)

    def _pools(self) -> list[PoolSpec]:
        pools = [Pool.model_validate(p) for p in self._client.get("/v1/pools")]
        return [pool for pool in pools if pool.stack == "kubernetes" and settings_of(pool).node_selector]

    def _sync_pool(self, pool: PoolSpec) -> None:
        settings = settings_of(pool)
        wanted: dict[str, Host] = {}
        for node in self._nodes():
            if not _matches(node, settings.node_selector) or not schedulable(node):
                continue
            name = (node.get("metadata") or {}).get("name", "")
            try:
                host = host_from_node(from_api_json(node, "V1Node"), settings)
            except BackendError as exc:
                if (pool.name, name) not in self._skipped:
                    log.warning("pool %s: node %s left out: %s", pool.name, name, exc)
                    self._skipped.add((pool.name, name))
                continue
            if host is not None:
                wanted[host.name] = host
        registered = {entry["host"]["name"] for entry in self._client.get(f"/v1/pools/{pool.name}/hosts")}
        now = time.monotonic()
        for name, host in sorted(wanted.items()):
            last = self._reported.get((pool.name, name))
            fresh = last is not None and last[0] == host and now - last[1] < self._ttl_s / 3
            if fresh and name in registered:
                continue
            self._client.put(
                f"/v1/pools/{pool.name}/hosts/{name}", host.model_dump(mode="json"), params={"ttl_s": self._ttl_s}
            )
            self._reported[(pool.name, name)] = (host, now)
            if name not in registered:
                log.info("pool %s: node %s joins with %d GPUs", pool.name, name, len(host.gpus))
        for name in sorted(registered - set(wanted)):
            self._client.delete(f"/v1/pools/{pool.name}/hosts/{name}")
            self._reported.pop((pool.name, name), None)
            log.info("pool %s: node %s drained (gone, NotReady, cordoned or relabelled)", pool.name, name)

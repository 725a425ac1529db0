"""How the backend reaches a pool's workspace, and what it learns from it once.

The runtime version and the GPU node types of a workspace change rarely, so they are read once per
backend (per host/profile) and kept; pools that state them in settings never cause a call. The client
factory is injectable so tests and embedders can point the SDK anywhere.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from databricks.sdk import WorkspaceClient

from respools_databricks.node_types import gpu_node_types
from respools_databricks.runtime import latest_gpu_ml_runtime, require_gpu_ml_runtime
from respools_databricks.settings import DatabricksSettings

WorkspaceFactory = Callable[[DatabricksSettings], WorkspaceClient]


def default_workspace(settings: DatabricksSettings) -> WorkspaceClient:
    """The SDK's unified authentication (environment, config profile, cloud CLIs) for the pool's workspace."""
    return WorkspaceClient(host=settings.host, profile=settings.profile)


class WorkspaceFacts:
    """Runtime version and GPU node types per workspace, resolved on first use."""

    def __init__(self, factory: WorkspaceFactory) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._runtimes: dict[tuple[str | None, str | None], str] = {}
        self._node_types: dict[tuple[str | None, str | None], dict[int, str]] = {}

    def spark_version(self, settings: DatabricksSettings) -> str:
        if settings.spark_version is not None:
            return require_gpu_ml_runtime(settings.spark_version)
        key = (settings.host, settings.profile)
        with self._lock:
            if key not in self._runtimes:
                self._runtimes[key] = latest_gpu_ml_runtime(self._factory(settings))
            return self._runtimes[key]

    def node_types(self, settings: DatabricksSettings) -> dict[int, str]:
        if settings.node_types:
            return dict(sorted(settings.node_types.items()))
        key = (settings.host, settings.profile)
        with self._lock:
            if key not in self._node_types:
                listed = self._factory(settings).clusters.list_node_types().node_types or []
                self._node_types[key] = gpu_node_types(listed)
            return self._node_types[key]

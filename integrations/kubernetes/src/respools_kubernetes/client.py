"""How the backend reaches a pool's cluster: an :class:`ApiClient` per call, from the pool's settings.

The factory is injectable so that tests (and embedders with their own credentials) can point the backend
at any API server without touching global kubeconfig state.
"""

from __future__ import annotations

from collections.abc import Callable

from kubernetes import config
from kubernetes.client import ApiClient, Configuration

from respools_kubernetes.settings import KubernetesSettings

ApiClientFactory = Callable[[KubernetesSettings], ApiClient]


def default_api_client(settings: KubernetesSettings) -> ApiClient:
    """In-cluster service account where asked, else the kubeconfig file and context the pool names."""
    if settings.in_cluster:
        configuration = Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return ApiClient(configuration)
    client: ApiClient = config.new_client_from_config(
        config_file=settings.kubeconfig, context=settings.context, persist_config=False
    )
    return client

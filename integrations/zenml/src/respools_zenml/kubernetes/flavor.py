"""The ``respools_kubernetes`` orchestrator flavor: how ZenML finds the pooled Kubernetes orchestrator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zenml.integrations.kubernetes.flavors.kubernetes_orchestrator_flavor import KubernetesOrchestratorFlavor

if TYPE_CHECKING:
    from zenml.integrations.kubernetes.flavors.kubernetes_orchestrator_flavor import KubernetesOrchestratorConfig
    from zenml.integrations.kubernetes.orchestrators.kubernetes_orchestrator import KubernetesOrchestrator

FLAVOR_NAME = "respools_kubernetes"


class PooledKubernetesOrchestratorFlavor(KubernetesOrchestratorFlavor):
    """ZenML's Kubernetes orchestrator, creating pooled steps' pods only under a granted respools lease."""

    @property
    def name(self) -> str:
        return FLAVOR_NAME

    @property
    def docs_url(self) -> str | None:
        return None

    @property
    def sdk_docs_url(self) -> str | None:
        return None

    @property
    def config_class(self) -> type[KubernetesOrchestratorConfig]:
        from respools_zenml.kubernetes.orchestrator import PooledKubernetesOrchestratorConfig

        return PooledKubernetesOrchestratorConfig

    @property
    def implementation_class(self) -> type[KubernetesOrchestrator]:
        from respools_zenml.kubernetes.orchestrator import PooledKubernetesOrchestrator

        return PooledKubernetesOrchestrator

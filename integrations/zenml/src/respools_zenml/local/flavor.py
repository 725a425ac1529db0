"""The ``respools_local`` orchestrator flavor: how ZenML finds the pooled local orchestrator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zenml.orchestrators import BaseOrchestratorConfig, BaseOrchestratorFlavor

if TYPE_CHECKING:
    from respools_zenml.local.orchestrator import PooledLocalOrchestrator

FLAVOR_NAME = "respools_local"


class PooledLocalOrchestratorFlavor(BaseOrchestratorFlavor):
    """ZenML's local orchestrator with respools leases around pooled steps."""

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
    def logo_url(self) -> str:
        return "https://public-flavor-logos.s3.eu-central-1.amazonaws.com/orchestrator/local.png"

    @property
    def config_class(self) -> type[BaseOrchestratorConfig]:
        from respools_zenml.local.orchestrator import PooledLocalOrchestratorConfig

        return PooledLocalOrchestratorConfig

    @property
    def implementation_class(self) -> type[PooledLocalOrchestrator]:
        from respools_zenml.local.orchestrator import PooledLocalOrchestrator

        return PooledLocalOrchestrator

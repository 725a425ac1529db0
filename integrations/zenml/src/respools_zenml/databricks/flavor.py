"""The ``respools_databricks`` orchestrator flavor: how ZenML finds the pooled Databricks orchestrator.

Importing this module needs only ZenML (its Databricks flavor module imports no Databricks library); the
orchestrator needs ``databricks-sdk`` and ``respools-databricks`` (the ``respools-zenml[databricks]`` extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zenml.integrations.databricks.flavors.databricks_orchestrator_flavor import DatabricksOrchestratorFlavor

if TYPE_CHECKING:
    from respools_zenml.databricks.orchestrator import (
        PooledDatabricksOrchestrator,
        PooledDatabricksOrchestratorConfig,
    )

FLAVOR_NAME = "respools_databricks"


class PooledDatabricksOrchestratorFlavor(DatabricksOrchestratorFlavor):
    """ZenML's Databricks orchestrator with a respools lease around each pipeline run's job."""

    @property
    def name(self) -> str:
        return FLAVOR_NAME

    @property
    def display_name(self) -> str:
        return "Databricks (respools pool)"

    @property
    def config_class(self) -> type[PooledDatabricksOrchestratorConfig]:
        from respools_zenml.databricks.orchestrator import PooledDatabricksOrchestratorConfig

        return PooledDatabricksOrchestratorConfig

    @property
    def implementation_class(self) -> type[PooledDatabricksOrchestrator]:
        from respools_zenml.databricks.orchestrator import PooledDatabricksOrchestrator

        return PooledDatabricksOrchestrator

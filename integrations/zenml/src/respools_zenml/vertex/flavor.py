"""The ``respools_vertex`` step operator flavor: how ZenML finds the pooled Vertex step operator.

Importing this module needs ZenML's GCP integration to be importable (its flavor module imports no Google
library itself); the step operator needs ``google-cloud-aiplatform`` and ``respools-vertex`` (the
``respools-zenml[vertex]`` extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zenml.integrations.gcp.flavors.vertex_step_operator_flavor import VertexStepOperatorFlavor

if TYPE_CHECKING:
    from respools_zenml.vertex.step_operator import PooledVertexStepOperator, PooledVertexStepOperatorConfig

FLAVOR_NAME = "respools_vertex"


class PooledVertexStepOperatorFlavor(VertexStepOperatorFlavor):
    """ZenML's Vertex step operator with a respools lease around each step's custom job."""

    @property
    def name(self) -> str:
        return FLAVOR_NAME

    @property
    def display_name(self) -> str:
        return "Vertex AI (respools pool)"

    @property
    def config_class(self) -> type[PooledVertexStepOperatorConfig]:
        from respools_zenml.vertex.step_operator import PooledVertexStepOperatorConfig

        return PooledVertexStepOperatorConfig

    @property
    def implementation_class(self) -> type[PooledVertexStepOperator]:
        from respools_zenml.vertex.step_operator import PooledVertexStepOperator

        return PooledVertexStepOperator

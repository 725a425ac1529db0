"""The pooled orchestrator flavors, and registering them with a ZenML store.

ZenML learns about a flavor from its store. ``zenml orchestrator flavor register
respools_zenml.flavors.PooledLocalOrchestratorFlavor`` registers one, as for any custom flavor;
:func:`register_flavors` (also the ``respools-zenml register-flavors`` command this package installs)
registers them all (orchestrators and step operators), and updates them in place after an upgrade of
this package changed their config schema.
"""

from __future__ import annotations

from zenml.client import Client
from zenml.models import FlavorFilter, FlavorResponse, FlavorUpdate
from zenml.stack.flavor import Flavor

from respools_zenml.kubernetes.flavor import PooledKubernetesOrchestratorFlavor
from respools_zenml.local.flavor import PooledLocalOrchestratorFlavor
from respools_zenml.step_operator.generic import PooledStepOperatorFlavor

FLAVORS: tuple[type[Flavor], ...] = (PooledLocalOrchestratorFlavor, PooledKubernetesOrchestratorFlavor)
FLAVORS += (PooledStepOperatorFlavor,)
try:  # the pooled Vertex step operator needs ZenML's GCP integration (respools-zenml[vertex])
    from respools_zenml.vertex.flavor import PooledVertexStepOperatorFlavor
except ImportError:  # pragma: no cover - without google-cloud-aiplatform
    pass
else:
    FLAVORS += (PooledVertexStepOperatorFlavor,)
try:  # the pooled Databricks orchestrator needs respools-databricks (respools-zenml[databricks])
    import respools_databricks  # noqa: F401
except ImportError:  # pragma: no cover - without respools-databricks
    pass
else:
    from respools_zenml.databricks.flavor import PooledDatabricksOrchestratorFlavor

    FLAVORS += (PooledDatabricksOrchestratorFlavor,)
INTEGRATION = "respools"


def register_flavors(client: Client | None = None) -> list[FlavorResponse]:
    """Create or update both flavors in the store of ``client`` (default: the active ZenML client)."""
    client = client or Client()
    store = client.zen_store
    registered: list[FlavorResponse] = []
    for flavor_class in FLAVORS:
        request = flavor_class().to_model(integration=INTEGRATION, is_custom=True)
        existing = store.list_flavors(FlavorFilter(name=request.name, type=request.type))
        if existing.items:
            update = FlavorUpdate.model_validate(dict(request))
            registered.append(store.update_flavor(existing.items[0].id, update))
        else:
            registered.append(store.create_flavor(request))
    return registered


__all__ = ["FLAVORS", "PooledKubernetesOrchestratorFlavor", "PooledLocalOrchestratorFlavor", "register_flavors"]

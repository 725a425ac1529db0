"""The respools controller for Kubernetes: admits labelled GPU workloads through respools leases, keeps
the pools' inventory in step with the cluster's Nodes, and requeues preempted workloads.

It talks to the cluster through the official ``kubernetes`` client (list + watch) and to the pool
service through :class:`respools.Client` only, like any other holder of leases.
"""

from respools_kubernetes.controller.manager import Controller
from respools_kubernetes.controller.settings import ControllerSettings

__all__ = ["Controller", "ControllerSettings"]

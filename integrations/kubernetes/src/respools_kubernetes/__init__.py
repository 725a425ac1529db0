"""respools on Kubernetes: leases become pod resources (``nvidia.com/gpu``, ``nvidia.com/mig-<profile>``,
HAMi or Run:ai fractions) pinned to the placed node; inventory comes from Node objects; ``stop`` deletes
the lease's pods."""

from respools_kubernetes.backend import KubernetesBackend
from respools_kubernetes.pods import apply_to_pod
from respools_kubernetes.settings import KubernetesSettings

__all__ = ["KubernetesBackend", "KubernetesSettings", "apply_to_pod"]

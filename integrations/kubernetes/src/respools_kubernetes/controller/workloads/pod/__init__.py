"""Plain Pods, held by the ``respools.io/admission`` scheduling gate."""

from respools_kubernetes.controller.workloads.pod.kind import PodKind

__all__ = ["PodKind"]

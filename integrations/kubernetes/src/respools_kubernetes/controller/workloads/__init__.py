"""The kinds of workload the controller admits, one folder each behind :class:`WorkloadKind`
(Kueue's ``pkg/controller/jobs/<kind>`` layout): a new kind is a new folder and one line in
:data:`KINDS`."""

from respools_kubernetes.controller.workloads.base import WorkloadKind
from respools_kubernetes.controller.workloads.job import JobKind
from respools_kubernetes.controller.workloads.pod import PodKind

__all__ = ["KINDS", "JobKind", "PodKind", "WorkloadKind"]

KINDS: tuple[type[WorkloadKind], ...] = (JobKind, PodKind)

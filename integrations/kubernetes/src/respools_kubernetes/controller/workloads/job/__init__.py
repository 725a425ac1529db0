"""``batch/v1`` Jobs, held by ``suspend`` (Kueue's way); Indexed Jobs and ``parallelism`` > 1 are gangs."""

from respools_kubernetes.controller.workloads.job.kind import JobKind

__all__ = ["JobKind"]

"""Labels and annotations the controller reads and writes on workloads (the ``respools.io/`` prefix).

The workload's annotations are the controller's memory: a restarted controller (or a new leader) picks
every workload up where the last one left it, from these and the request they name.
"""

from __future__ import annotations

from respools_kubernetes.labels import LEASE_LABEL

PREFIX = "respools.io/"

POOL = PREFIX + "pool"
"""On a workload or its namespace: the pool that admits it (workload first)."""
SUBJECT = PREFIX + "subject"
"""On a workload or its namespace: the subject the request is made for (default: the token's)."""
PREEMPTIBLE = PREFIX + "preemptible"
"""``"false"`` asks for a non-preemptible lease; workloads are preemptible by default."""
MAX_RETRIES = PREFIX + "max-retries"
PRIORITY = PREFIX + "priority"
REQUEUE = PREFIX + "requeue"
"""``"true"`` on a plain Pod: recreate it from its spec after preemption (Jobs always requeue)."""
GPU_FRACTION = PREFIX + "gpu-fraction"
"""Pod template annotation: a share of one GPU (``"0.25"``), for pools with a GPU sharing layer."""
GPU_MEMORY_MB = PREFIX + "gpu-memory-mb"

REQUEST_ID = PREFIX + "request-id"
LEASE_ID = LEASE_LABEL
"""The lease id, as a label on the workload and its pods (how their pods are found) and an annotation."""
STATE = PREFIX + "state"
REASON = PREFIX + "reason"
ATTEMPT = PREFIX + "attempt"
PREEMPT_DEADLINE = PREFIX + "preempt-deadline"
PREEMPT_REASON = PREFIX + "preempt-reason"
ORIGINAL_SCHEDULING = PREFIX + "original-scheduling"
"""The template's own affinity, nodeSelector and tolerations before the first admission, so that a
requeued workload is placed afresh rather than ANDed with its last host."""

SCHEDULING_GATE = PREFIX + "admission"
"""The Pod scheduling gate the controller lifts on grant."""

MANAGED_BY = PREFIX + "managed-by"
"""Label on every request the controller submits, with the workload's uid in ``k8s-uid``."""
MANAGED_BY_VALUE = "kubernetes-controller"
WORKLOAD_UID = "k8s-uid"


class State:
    """Values of the ``respools.io/state`` annotation."""

    WAITING = "waiting"
    ADMITTED = "admitted"
    PREEMPTING = "preempting"
    REQUEUED = "requeued"
    PREEMPTED = "preempted"
    REJECTED = "rejected"
    FINISHED = "finished"
    UNGATED = "ungated"

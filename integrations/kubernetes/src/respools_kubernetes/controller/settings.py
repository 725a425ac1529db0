"""How the controller runs: where its leader Lease lives, how often it resyncs, how long its reports last."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field


def _identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class ControllerSettings:
    namespace: str = "respools-system"
    """Where the leader-election Lease lives (the controller's own namespace)."""
    lease_name: str = "respools-controller"
    identity: str = field(default_factory=_identity)
    lease_duration_s: float = 15.0
    """A leader not heard from for this long is replaced (Kubernetes' own controllers use 15 s)."""
    resync_s: float = 5.0
    """Every workload is looked at again this often: waiting reasons, preemption deadlines, workloads
    whose lease the keeper does not keep yet. Heartbeats no longer depend on it (the keeper renews)."""
    lease_ttl_s: float = 60.0
    """The lease TTL the keeper renews at first (every third of it); a pool with a shorter TTL, seen when
    one of its leases is kept, quickens the pace for all."""
    watch_timeout_s: int = 300
    """A watch is reopened (from its resourceVersion) after this long, as client-go does."""
    host_ttl_s: float = 120.0
    """How long a Node's host report lives in the service without renewal; a controller that dies takes
    its nodes out of the pools after this long."""
    default_max_retries: int = 3
    """Requeues of a preempted Job when the workload does not say (``respools.io/max-retries``)."""

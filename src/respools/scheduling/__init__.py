"""The pure scheduling core (DESIGN §2): no I/O, no clock; time is an input.

``schedule(snapshot)`` decides one cycle (a ``Memory`` is what a caller that schedules the same pools
and queue again and again keeps between cycles); the ``check_*`` functions refuse definitions that could not
be honoured, each with the field at fault.
"""

from respools.scheduling.catalogue import MIG_PROFILES, gpu_class, mig_profiles_of
from respools.scheduling.cycle import schedule
from respools.scheduling.decisions import (
    Decisions,
    Expire,
    Grant,
    Overdue,
    Preempt,
    Reject,
    Revoke,
    Wait,
    WaitRun,
)
from respools.scheduling.memory import Memory
from respools.scheduling.snapshot import Snapshot
from respools.scheduling.validation import (
    DefinitionError,
    check_policy,
    check_pool,
    check_reservation,
    pool_capacity,
)

__all__ = [
    "MIG_PROFILES",
    "Decisions",
    "DefinitionError",
    "Expire",
    "Grant",
    "Memory",
    "Overdue",
    "Preempt",
    "Reject",
    "Revoke",
    "Snapshot",
    "Wait",
    "WaitRun",
    "check_policy",
    "check_pool",
    "check_reservation",
    "gpu_class",
    "mig_profiles_of",
    "pool_capacity",
    "schedule",
]

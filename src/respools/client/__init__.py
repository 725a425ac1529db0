"""The respools client SDK: the REST API (:class:`Client`) and the ways a step holds a lease —
``with respools.lease(...)``, ``@respools.requires(...)`` and, for any command, ``respools run``.

See ``docs/client.md``. Layout, one job per module: ``config`` (where the server is), ``transport`` (HTTP
and retries), ``api`` (the endpoints), ``queue`` (a request's place in the queue), ``progress`` (what a
waiting step shows), ``holding`` and ``monitor`` (one granted lease and its heartbeat thread),
``delivery`` (exceptions into the step's thread), ``environment`` (realization and ``os.environ``),
``session`` (the ``with`` block), ``retry`` (reruns after requeue), ``supervise`` (``respools run``).
"""

from respools.client.api import Client
from respools.client.environment import RealizationError
from respools.client.errors import (
    ApiError,
    ConfigError,
    LeaseError,
    LeaseLost,
    LeasePreempted,
    NoActiveLease,
    NotGranted,
    RespoolsError,
    ServerUnreachable,
    WaitTimeout,
)
from respools.client.hooks import Hooks
from respools.client.leasing import lease, requires
from respools.client.retry import Backoff
from respools.client.session import LeaseSession, checkpointed, current_lease
from respools.client.transport import RetryPolicy

__all__ = [
    "ApiError",
    "Backoff",
    "Client",
    "ConfigError",
    "Hooks",
    "LeaseError",
    "LeaseLost",
    "LeasePreempted",
    "LeaseSession",
    "NoActiveLease",
    "NotGranted",
    "RealizationError",
    "RespoolsError",
    "RetryPolicy",
    "ServerUnreachable",
    "WaitTimeout",
    "checkpointed",
    "current_lease",
    "lease",
    "requires",
]

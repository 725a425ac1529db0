"""respools: GPU resource pools for ML pipelines, on any stack.

The public API is the client's: ``respools.lease``, ``respools.requires``, ``respools.current_lease``,
``respools.checkpointed``, ``respools.LeasePreempted``, ``respools.Client``, ``respools.ApiError`` and the
hooks. It is imported on
first use, so the server, the scheduler and the host agent, which import ``respools.model`` and friends,
do not pay for the client's HTTP and terminal libraries.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from respools.client import (
        ApiError,
        Client,
        ConfigError,
        Hooks,
        LeaseError,
        LeaseLost,
        LeasePreempted,
        LeaseSession,
        NoActiveLease,
        NotGranted,
        RespoolsError,
        ServerUnreachable,
        WaitTimeout,
        checkpointed,
        current_lease,
        lease,
        requires,
    )

__all__ = [
    "ApiError",
    "Client",
    "ConfigError",
    "Hooks",
    "LeaseError",
    "LeaseLost",
    "LeasePreempted",
    "LeaseSession",
    "NoActiveLease",
    "NotGranted",
    "RespoolsError",
    "ServerUnreachable",
    "WaitTimeout",
    "__version__",
    "checkpointed",
    "current_lease",
    "lease",
    "requires",
]
_CLIENT_EXPORTS = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    if name in _CLIENT_EXPORTS:
        value = getattr(importlib.import_module("respools.client"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'respools' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _CLIENT_EXPORTS)

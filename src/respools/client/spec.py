"""Turning keyword arguments (``gpu=0.5, mig="3g.40gb", pool="west", tensorrt_sessions=1``) into the
contract's :class:`RequestSpec`, so ``respools.lease``, ``@respools.requires`` and ``respools run`` ask
for resources the same way and get the same validation messages."""

from __future__ import annotations

import contextlib
import getpass
import socket
from collections.abc import Mapping, Sequence

from respools.model import GPU, RequestSpec, mig_key

MigArg = str | Mapping[str, int] | None
"""One MIG slice by profile (``"3g.40gb"``) or counts by profile (``{"1g.10gb": 2}``)."""
PoolArg = str | Sequence[str] | None


def _default_labels() -> dict[str, str]:
    """Who and where, for the dashboard and the event log; the caller's labels win."""
    labels: dict[str, str] = {}
    with contextlib.suppress(KeyError, OSError):  # no passwd entry (containers with arbitrary uids)
        labels["user"] = getpass.getuser()
    labels["host"] = socket.gethostname()
    return labels


def build_spec(
    *,
    gpu: float | None = None,
    mig: MigArg = None,
    pool: PoolArg = None,
    preemptible: bool = False,
    priority: int = 0,
    max_retries: int = 0,
    labels: Mapping[str, str] | None = None,
    subject: str | None = None,
    gpu_class: str | None = None,
    selectors: Mapping[str, str] | None = None,
    max_runtime_s: float | None = None,
    idempotency_key: str | None = None,
    resources: Mapping[str, float] | None = None,
) -> RequestSpec:
    """A validated request spec; raises ``ValueError`` (pydantic's, which names the field) when invalid."""
    vector: dict[str, float] = dict(resources or {})
    if gpu is not None:
        vector[GPU] = gpu
    if isinstance(mig, str):
        vector[mig_key(mig)] = vector.get(mig_key(mig), 0) + 1
    elif mig is not None:
        for profile, count in mig.items():
            vector[mig_key(profile)] = count
    if not any(vector.values()):
        raise ValueError("ask for at least one resource, e.g. gpu=1, gpu=0.25 or mig='3g.40gb'")
    pools = [pool] if isinstance(pool, str) else (list(pool) if pool is not None else None)
    return RequestSpec(
        subject=subject,
        resources=vector,
        preemptible=preemptible,
        priority=priority,
        pools=pools,
        gpu_class=gpu_class,
        selectors=dict(selectors or {}),
        labels=_default_labels() | dict(labels or {}),
        idempotency_key=idempotency_key,
        max_retries=max_retries,
        max_runtime_s=max_runtime_s,
    )

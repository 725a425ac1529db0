"""The front doors: ``respools.lease(...)`` for a block, ``@respools.requires(...)`` for a function.

Both take the same arguments: what to ask for (``gpu``, ``mig``, any other key as a keyword such as
``tensorrt_sessions=1``), where (``pool``), how (``preemptible``, ``priority``, ``max_retries``), hooks,
and the ``client`` (default: configured from ``RESPOOLS_URL`` / ``RESPOOLS_TOKEN`` or the config file).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import ParamSpec, TypeVar

from respools.client.api import Client
from respools.client.hooks import Hooks
from respools.client.retry import Backoff, run_with_retries
from respools.client.session import LeaseSession
from respools.client.spec import MigArg, PoolArg, build_spec

P = ParamSpec("P")
T = TypeVar("T")
Hook = Callable[[LeaseSession], object]


def lease(
    gpu: float | None = None,
    mig: MigArg = None,
    *,
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
    timeout: float | None = None,
    progress: bool | None = None,
    interrupt: bool = True,
    fence: bool = True,
    on_granted: Hook | None = None,
    on_preempted: Hook | None = None,
    on_requeued: Hook | None = None,
    on_released: Hook | None = None,
    client: Client | None = None,
    **resources: float,
) -> LeaseSession:
    """A lease to hold with ``with``::

        with respools.lease(gpu=1, preemptible=True) as lease:
            train(devices=lease.env["CUDA_VISIBLE_DEVICES"])

    ``timeout`` bounds the wait for a grant (:class:`WaitTimeout`); ``progress`` forces the live progress
    line on or off (default: on when stderr is a terminal); ``interrupt=False`` leaves notice to
    ``lease.check()`` / ``lease.preempted`` instead of raising it in the block. A block still running at
    the preemption deadline ends this process after releasing the lease (exit status 137), since the
    service keeps the GPUs for it until then; ``fence=False`` leaves stopping to the caller. With
    ``max_retries`` the server requeues the request after a preemption; enter the same session again to
    rerun, or use :func:`requires`, which does.
    """
    spec = build_spec(
        gpu=gpu,
        mig=mig,
        pool=pool,
        preemptible=preemptible,
        priority=priority,
        max_retries=max_retries,
        labels=labels,
        subject=subject,
        gpu_class=gpu_class,
        selectors=selectors,
        max_runtime_s=max_runtime_s,
        idempotency_key=idempotency_key,
        resources=resources,
    )
    hooks: Hooks[LeaseSession] = Hooks(on_granted, on_preempted, on_requeued, on_released)
    return LeaseSession(
        spec, client=client, hooks=hooks, timeout=timeout, progress=progress, interrupt=interrupt, fence=fence
    )


def requires(
    gpu: float | None = None,
    mig: MigArg = None,
    *,
    pool: PoolArg = None,
    preemptible: bool = False,
    priority: int = 0,
    max_retries: int = 0,
    retry_backoff_s: float = 1.0,
    labels: Mapping[str, str] | None = None,
    subject: str | None = None,
    gpu_class: str | None = None,
    selectors: Mapping[str, str] | None = None,
    max_runtime_s: float | None = None,
    timeout: float | None = None,
    progress: bool | None = None,
    interrupt: bool = True,
    fence: bool = True,
    on_granted: Hook | None = None,
    on_preempted: Hook | None = None,
    on_requeued: Hook | None = None,
    on_released: Hook | None = None,
    client: Client | None = None,
    **resources: float,
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Run the decorated function holding a lease, and again after each preemption the server requeues
    (up to ``max_retries``, pausing ``retry_backoff_s``, doubling). Inside, ``respools.current_lease()``
    gives the lease; its ``attempt`` tells a rerun to resume from its checkpoint::

        @respools.requires(gpu=2, preemptible=True, max_retries=3)
        def train():
            start = load_checkpoint() if respools.current_lease().attempt else 0
            ...

    Each call is its own request. The arguments are checked when decorating, so a typo fails at import."""
    spec = build_spec(
        gpu=gpu,
        mig=mig,
        pool=pool,
        preemptible=preemptible,
        priority=priority,
        max_retries=max_retries,
        labels=labels,
        subject=subject,
        gpu_class=gpu_class,
        selectors=selectors,
        max_runtime_s=max_runtime_s,
        resources=resources,
    )
    hooks: Hooks[LeaseSession] = Hooks(on_granted, on_preempted, on_requeued, on_released)
    backoff = Backoff(base_s=retry_backoff_s)

    def decorate(function: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            session = LeaseSession(
                spec,
                client=client,
                hooks=hooks,
                timeout=timeout,
                progress=progress,
                interrupt=interrupt,
                fence=fence,
            )
            return run_with_retries(session, lambda: function(*args, **kwargs), backoff)

        return wrapper

    return decorate

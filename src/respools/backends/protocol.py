"""The contract between respools and a stack: what a backend can express, and how a lease becomes the
stack's own request. Stack integrations implement it and register under the ``respools.backends``
entry-point group, so the core never imports them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field

from respools.model import Form, Host, Lease, PoolSpec

if TYPE_CHECKING:
    from respools.backends.jobs import JobRunner


class BackendError(ValueError):
    """A pool or lease the stack cannot express; the message says which forms it supports."""


class Realization(BaseModel):
    """A lease in the stack's own terms.

    ``env`` is what a process on the placed host needs (``CUDA_VISIBLE_DEVICES`` and memory caps);
    ``native`` is the stack's request as plain JSON (pod resources, a ``machine_spec``, a cluster spec),
    validated against the stack's client models by the backend that builds it.
    """

    backend: str
    env: dict[str, str] = Field(default_factory=dict)
    native: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


class Backend(ABC):
    """One stack. Subclasses set ``name`` and ``forms`` and implement the four verbs."""

    name: ClassVar[str]
    forms: ClassVar[frozenset[Form]]
    runs_jobs: ClassVar[bool] = False
    """Whether :meth:`job_runner` gives a runner: the stack runs a lease's work as a job of its own."""

    def validate_pool(self, pool: PoolSpec) -> None:
        """Refuse a pool that asks for a form this stack cannot express (raise :class:`BackendError`).

        Backends with settings of their own extend this and call ``super()``."""
        asked = set(pool.forms) if pool.forms is not None else set()
        missing = sorted(asked - self.forms)
        if missing:
            raise BackendError(
                f"pool {pool.name!r}: stack {self.name!r} cannot express {', '.join(missing)}; "
                f"it supports {', '.join(sorted(self.forms))}"
            )

    def effective_forms(self, pool: PoolSpec) -> frozenset[Form]:
        return frozenset(pool.forms) & self.forms if pool.forms is not None else self.forms

    @abstractmethod
    def discover(self, pool: PoolSpec) -> list[Host]:
        """Inventory the stack shows for this pool (hosts and their GPUs); empty where it shows none."""

    @abstractmethod
    def realize(self, lease: Lease, pool: PoolSpec) -> Realization:
        """Turn a granted lease into the stack's request. Pure: no side effects on the stack."""

    @abstractmethod
    def stop(self, lease: Lease, pool: PoolSpec) -> None:
        """Stop the workload of a lease whose preemption deadline passed."""

    def confirm_stopped(self, lease: Lease, pool: PoolSpec) -> str | None:
        """Evidence (one line) that the lease's workload is gone and holds none of its devices, or ``None``
        while it may still run or this backend cannot tell from here.

        The service hands an overdue lease's capacity over only on a release, this confirmation, or a
        full TTL of the holder's silence (DESIGN §2.8), so answering ``None`` is always safe; answering
        evidence for a workload that still runs puts two workloads on one GPU. Runners that watch a job
        out of process confirm through ``POST /v1/leases/{id}/stopped`` (``Client.confirm_stopped``)."""
        return None

    def capacity_warnings(self, pool: PoolSpec) -> list[str]:
        """Where the pool promises more than the stack can give (a provider's quota, its node types): said
        at ``respools apply``, as warnings, since quota changes and the pool may be meant for later."""
        return []

    def job_runner(self, pool: PoolSpec) -> JobRunner | None:
        """The runner that turns a lease into a job of the stack's own (``respools run --pool``), or ``None``
        for stacks whose work runs in the holder's own process (local, Kubernetes pods)."""
        return None

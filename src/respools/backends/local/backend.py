"""The ``local`` stack: GPUs of the machines the host agent runs on, driven through NVML.

This class is glue: discovery, realization, the MPS probe, holder registrations and stopping each live in
their own module, so each can be tested without the others. One instance stands for one host; a caller
that wants another host's view (the server rendering a realization, say) passes ``host=``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import ClassVar

from respools.backends.local.confirm import ComputePids, compute_pids, confirm_gone
from respools.backends.local.discovery import Discovery, discover_host
from respools.backends.local.holders import HolderRegistry, unregister_holder
from respools.backends.local.hostname import local_host_name
from respools.backends.local.mps import MpsState, probe_mps
from respools.backends.local.realize import realize_local
from respools.backends.local.settings import local_settings
from respools.backends.local.stopper import StopOutcome, stop_holder
from respools.backends.protocol import Backend, BackendError, Realization
from respools.model import Form, Host, Lease, PoolSpec

log = logging.getLogger(__name__)

CONFIRM_SETTLE_S = 2.0
"""How long :meth:`LocalBackend.confirm_stopped` keeps checking a registered workload before answering
that its stop is not confirmed (the agent asks again on its next tick)."""
CONFIRM_POLL_S = 0.1


class LocalBackend(Backend):
    name: ClassVar[str] = "local"
    forms: ClassVar[frozenset[Form]] = frozenset({Form.WHOLE, Form.MIG, Form.FRACTION})

    def __init__(
        self,
        host: str | None = None,
        *,
        registry: HolderRegistry | None = None,
        mps_probe: Callable[[], MpsState] = probe_mps,
        compute_pids: ComputePids = compute_pids,
    ) -> None:
        self.host = host or local_host_name()
        self._registry = registry
        self._mps_probe = mps_probe
        self._compute_pids = compute_pids
        self.unavailable_reason: str | None = None
        """Why the last discovery found no host (one line), or ``None``."""

    @property
    def registry(self) -> HolderRegistry:
        if self._registry is None:
            self._registry = HolderRegistry()
        return self._registry

    def validate_pool(self, pool: PoolSpec) -> None:
        super().validate_pool(pool)
        local_settings(pool)

    def discover_local(self) -> Discovery:
        """This host and its GPUs, or no host and why; never raises for a missing driver."""
        found = discover_host(self.host)
        self.unavailable_reason = found.reason
        return found

    def discover(self, pool: PoolSpec) -> list[Host]:
        found = self.discover_local()
        if found.host is None:
            log.warning("host %s: %s", self.host, found.reason)
            return []
        return [found.host]

    def realize(self, lease: Lease, pool: PoolSpec) -> Realization:
        if lease.stack != self.name:
            raise BackendError(f"lease {lease.id} runs on stack {lease.stack!r}, not {self.name!r}")
        return realize_local(lease, pool, self.host, self._mps_probe(), self.name)

    def stop(self, lease: Lease, pool: PoolSpec) -> None:
        """SIGTERM, then SIGKILL after ``settings.stop_kill_after_s``, to the lease's registered process
        group on this host. A lease with no registration here is left alone (its holder stops itself).
        The registration stays until :meth:`confirm_stopped` vouches for the stop."""
        holder = self.registry.get(lease.id)
        if holder is None:
            log.info("lease %s: no live process registered on %s; nothing to stop here", lease.id, self.host)
            return
        outcome = stop_holder(holder, local_settings(pool).stop_kill_after_s)
        if outcome is not StopOutcome.GONE:
            log.info("lease %s: workload %s", lease.id, outcome.value)

    def confirm_stopped(self, lease: Lease, pool: PoolSpec) -> str | None:
        """Evidence that the lease's registered workload on this host is gone and NVML shows none of it
        on the lease's GPUs (:func:`confirm_gone`); ``None`` while it is not, or when nothing of the lease
        was registered here (its holder may run elsewhere). A confirmed registration is removed."""
        holder = self.registry.get(lease.id, include_dead=True)
        if holder is None:
            return None
        settle = time.monotonic() + CONFIRM_SETTLE_S
        # A killed process's memory is freed a moment after it dies: ask again briefly before giving up.
        while (evidence := confirm_gone(holder, self._compute_pids)) is None and time.monotonic() < settle:
            time.sleep(CONFIRM_POLL_S)
        if evidence is not None:
            unregister_holder(lease.id, directory=self.registry.directory)
            evidence = f"{evidence} (host {holder.host})"
        return evidence

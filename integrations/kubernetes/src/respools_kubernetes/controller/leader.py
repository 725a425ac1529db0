"""Leader election through a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

One replica holds the Lease and renews it; the others read it and take over only once its renew time is
older than the lease duration. Every write carries the resourceVersion that was read, so when two
replicas race for an expired Lease the API server accepts one and answers the other 409 Conflict: two
replicas never both act.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client import CoordinationV1Api, V1Lease, V1LeaseSpec, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

from respools_kubernetes.api_json import to_api_json
from respools_kubernetes.controller.workloads.base import MERGE_PATCH

log = logging.getLogger(__name__)

_NOT_FOUND = 404
_CONFLICT = 409


class LeaderElector:
    def __init__(
        self, coordination: CoordinationV1Api, namespace: str, name: str, identity: str, duration_s: float
    ) -> None:
        self._api = coordination
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._duration_s = duration_s
        self.leading = False

    def try_lead(self) -> bool:
        """Acquire or renew the Lease; whether this replica leads now."""
        try:
            self.leading = self._acquire_or_renew()
        except ApiException as exc:
            if exc.status != _CONFLICT:
                log.warning("leader election: API error %s %s", exc.status, exc.reason)
            self.leading = False
        return self.leading

    def resign(self) -> None:
        """Give the Lease up at shutdown so that another replica takes over at once."""
        if not self.leading:
            return
        self.leading = False
        try:
            lease = self._api.read_namespaced_lease(self._name, self._namespace)
            if lease.spec and lease.spec.holder_identity == self.identity:
                self._write(lease, {"holderIdentity": None, "renewTime": None})
        except ApiException as exc:
            log.info("leader election: could not resign (%s %s)", exc.status, exc.reason)

    def _acquire_or_renew(self) -> bool:
        now = datetime.now(UTC)
        try:
            lease = self._api.read_namespaced_lease(self._name, self._namespace)
        except ApiException as exc:
            if exc.status != _NOT_FOUND:
                raise
            body = V1Lease(
                metadata=V1ObjectMeta(name=self._name, namespace=self._namespace),
                spec=self._spec(now, acquired=now, transitions=0),
            )
            self._api.create_namespaced_lease(self._namespace, body)
            log.info("leader election: %s leads (new Lease)", self.identity)
            return True
        spec = lease.spec or V1LeaseSpec()
        holder = spec.holder_identity
        if holder == self.identity:
            self._write(
                lease, self._spec(now, acquired=spec.acquire_time or now, transitions=spec.lease_transitions or 0)
            )
            return True
        renewed = spec.renew_time or spec.acquire_time
        duration = timedelta(seconds=spec.lease_duration_seconds or self._duration_s)
        if holder and renewed is not None and _aware(renewed) + duration > now:
            return False
        self._write(lease, self._spec(now, acquired=now, transitions=(spec.lease_transitions or 0) + 1))
        log.info("leader election: %s leads (took over from %s)", self.identity, holder or "nobody")
        return True

    def _write(self, lease: V1Lease, spec: V1LeaseSpec | dict[str, Any]) -> None:
        """A merge patch that carries the resourceVersion read: the server refuses it (409) when another
        replica wrote the Lease in between."""
        body = {
            "metadata": {"resourceVersion": lease.metadata.resource_version if lease.metadata else None},
            "spec": spec if isinstance(spec, dict) else to_api_json(spec),
        }
        self._api.patch_namespaced_lease(self._name, self._namespace, body, _content_type=MERGE_PATCH)

    def _spec(self, now: datetime, *, acquired: datetime, transitions: int) -> V1LeaseSpec:
        return V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=max(1, round(self._duration_s)),
            acquire_time=acquired,
            renew_time=now,
            lease_transitions=transitions,
        )


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)

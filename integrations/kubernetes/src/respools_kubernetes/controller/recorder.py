"""Kubernetes Events on workloads, so that ``kubectl describe`` says why a workload waits, was admitted,
preempted, requeued or rejected."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from kubernetes.client import CoreV1Api, CoreV1Event, V1EventSource, V1ObjectMeta, V1ObjectReference
from kubernetes.client.exceptions import ApiException

from respools_kubernetes.controller.workloads.base import Obj, metadata_of

log = logging.getLogger(__name__)

COMPONENT = "respools-controller"
_MESSAGE_LIMIT = 1024


class Recorder:
    def __init__(self, core: CoreV1Api) -> None:
        self._core = core

    def event(self, obj: Obj, kind: str, api_version: str, reason: str, message: str, *, warning: bool = False) -> None:
        """Record one Event; a failure is logged, never raised (an Event is a courtesy, not state)."""
        meta = metadata_of(obj)
        now = datetime.now(UTC)
        body = CoreV1Event(
            metadata=V1ObjectMeta(name=f"{meta.get('name')}.{uuid.uuid4().hex[:16]}", namespace=meta.get("namespace")),
            involved_object=V1ObjectReference(
                api_version=api_version,
                kind=kind,
                name=meta.get("name"),
                namespace=meta.get("namespace"),
                uid=meta.get("uid"),
            ),
            reason=reason,
            message=message[:_MESSAGE_LIMIT],
            type="Warning" if warning else "Normal",
            source=V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            self._core.create_namespaced_event(meta.get("namespace") or "default", body)
        except ApiException as exc:
            log.warning("could not record event %s on %s: %s %s", reason, meta.get("name"), exc.status, exc.reason)

"""A Pod waits behind the ``respools.io/admission`` scheduling gate and is admitted by narrowing its node
affinity to the granted host and removing the gate (both allowed on a gated Pod since Kubernetes 1.27).

A gate can only be removed after creation, never added, so a Pod must be created gated (by its author or
the mutating webhook). Pods a Job owns are the Job's business. After preemption a Pod is gone for good
unless it carries ``respools.io/requeue: "true"``; then it is created again from its spec, gated.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from respools_kubernetes.controller import names
from respools_kubernetes.controller.workloads.base import (
    MERGE_PATCH,
    Obj,
    WorkloadKind,
    annotations_of,
    labels_of,
    metadata_of,
)

_DONE_PHASES = {"Succeeded", "Failed"}
_CONFLICT = 409
_SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation", "managedFields")


class PodKind(WorkloadKind):
    kind: ClassVar[str] = "Pod"
    api_version: ClassVar[str] = "v1"
    can_hold_after_creation: ClassVar[bool] = False

    @property
    def _api(self) -> CoreV1Api:
        return CoreV1Api(self.api_client)

    def list_call(self) -> Callable[..., Any]:
        call: Callable[..., Any] = self._api.list_pod_for_all_namespaces
        return call

    def template(self, obj: Obj) -> Obj:
        return {"metadata": metadata_of(obj), "spec": obj.get("spec") or {}}

    def ignored(self, obj: Obj) -> bool:
        owners = metadata_of(obj).get("ownerReferences") or []
        return any(owner.get("kind") == "Job" and owner.get("controller") for owner in owners)

    def held(self, obj: Obj) -> bool:
        gates = (obj.get("spec") or {}).get("schedulingGates") or []
        return any(gate.get("name") == names.SCHEDULING_GATE for gate in gates)

    def hold(self, obj: Obj) -> Obj:
        raise ValueError(
            f"a Pod cannot be gated once created: create it with schedulingGates "
            f"[{{name: {names.SCHEDULING_GATE}}}] or install the respools webhook"
        )

    def admit(self, obj: Obj, template: Obj, annotations: Mapping[str, str | None], labels: Mapping[str, str]) -> Obj:
        spec = template.get("spec") or {}
        gates = [
            g for g in (obj.get("spec") or {}).get("schedulingGates") or [] if g.get("name") != names.SCHEDULING_GATE
        ]
        body = {
            "metadata": {
                "annotations": {**((template.get("metadata") or {}).get("annotations") or {}), **dict(annotations)},
                "labels": {**((template.get("metadata") or {}).get("labels") or {}), **dict(labels)},
            },
            "spec": {
                "affinity": spec.get("affinity"),
                "nodeSelector": spec.get("nodeSelector"),
                "tolerations": spec.get("tolerations"),
                "schedulingGates": gates or None,
            },
        }
        return self.patch(obj, body)

    def finished(self, obj: Obj) -> bool:
        return (obj.get("status") or {}).get("phase") in _DONE_PHASES

    def patch(self, obj: Obj, body: Obj) -> Obj:
        meta = metadata_of(obj)
        response = self._api.patch_namespaced_pod(
            meta["name"], meta["namespace"], body, _content_type=MERGE_PATCH, _preload_content=False
        )
        patched: Obj = json.loads(response.data)
        return patched

    def requeues(self, obj: Obj) -> bool:
        return (annotations_of(obj).get(names.REQUEUE) or labels_of(obj).get(names.REQUEUE)) == "true"

    def requeue(self, obj: Obj, template: Obj) -> Obj | None:
        """Create the Pod again from its last spec, gated, with its original scheduling; None while the
        old one still exists."""
        meta = {k: v for k, v in metadata_of(obj).items() if k not in _SERVER_SET}
        meta["labels"] = {k: v for k, v in labels_of(obj).items() if k != names.LEASE_ID} or None
        meta["annotations"] = {k: v for k, v in annotations_of(obj).items() if k != names.LEASE_ID}
        original = template.get("spec") or {}
        spec = {k: v for k, v in (obj.get("spec") or {}).items() if k != "nodeName"}
        for field in ("affinity", "nodeSelector", "tolerations"):
            spec.pop(field, None)
            if original.get(field) is not None:
                spec[field] = original[field]
        gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != names.SCHEDULING_GATE]
        spec["schedulingGates"] = [*gates, {"name": names.SCHEDULING_GATE}]
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        try:
            response = self._api.create_namespaced_pod(meta["namespace"], body, _preload_content=False)
        except ApiException as exc:
            if exc.status == _CONFLICT:
                return None
            raise
        created: Obj = json.loads(response.data)
        return created

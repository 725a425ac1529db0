"""A Job waits suspended, and is admitted by writing the placement into its pod template and unsuspending.

Kubernetes lets a suspended Job's template change its node affinity, node selector, tolerations, labels
and annotations (the fields Kueue's podset info restores too); containers are fixed, so the Job must
already ask for the devices it wants. A preempted Job is suspended again, which makes the Job controller
delete its pods without counting a failure, and waits for its next grant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from kubernetes.client import BatchV1Api

from respools_kubernetes.controller.workloads.base import MERGE_PATCH, Obj, WorkloadKind, metadata_of

_DONE_CONDITIONS = {"Complete", "Failed"}


class JobKind(WorkloadKind):
    kind: ClassVar[str] = "Job"
    api_version: ClassVar[str] = "batch/v1"
    can_hold_after_creation: ClassVar[bool] = True

    @property
    def _api(self) -> BatchV1Api:
        return BatchV1Api(self.api_client)

    def list_call(self) -> Callable[..., Any]:
        call: Callable[..., Any] = self._api.list_job_for_all_namespaces
        return call

    def template(self, obj: Obj) -> Obj:
        template: Obj = (obj.get("spec") or {}).get("template") or {}
        return template

    def replicas(self, obj: Obj) -> int:
        spec = obj.get("spec") or {}
        parallelism = int(spec.get("parallelism", 1) or 0)
        completions = spec.get("completions")
        if completions is not None:
            parallelism = min(parallelism, int(completions))
        return max(parallelism, 1)

    def held(self, obj: Obj) -> bool:
        return bool((obj.get("spec") or {}).get("suspend"))

    def hold(self, obj: Obj) -> Obj:
        return self.patch(obj, {"spec": {"suspend": True}})

    def admit(self, obj: Obj, template: Obj, annotations: Mapping[str, str | None], labels: Mapping[str, str]) -> Obj:
        body = {
            "metadata": {"annotations": dict(annotations), "labels": dict(labels)},
            "spec": {"suspend": False, "template": _scheduling_part(template)},
        }
        return self.patch(obj, body)

    def finished(self, obj: Obj) -> bool:
        conditions = (obj.get("status") or {}).get("conditions") or []
        return any(c.get("type") in _DONE_CONDITIONS and c.get("status") == "True" for c in conditions)

    def patch(self, obj: Obj, body: Obj) -> Obj:
        meta = metadata_of(obj)
        response = self._api.patch_namespaced_job(
            meta["name"], meta["namespace"], body, _content_type=MERGE_PATCH, _preload_content=False
        )
        return _json(response)

    def requeue(self, obj: Obj, template: Obj) -> Obj | None:
        body = {"spec": {"suspend": True, "template": _scheduling_part(template)}}
        return self.patch(obj, body)


def _scheduling_part(template: Obj) -> Obj:
    """The template fields a suspended Job may change, as a merge patch (None removes a field)."""
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    return {
        "metadata": {"labels": meta.get("labels"), "annotations": meta.get("annotations")},
        "spec": {
            "affinity": spec.get("affinity"),
            "nodeSelector": spec.get("nodeSelector"),
            "tolerations": spec.get("tolerations"),
        },
    }


def _json(response: Any) -> Obj:
    import json

    body: Obj = json.loads(response.data)
    return body

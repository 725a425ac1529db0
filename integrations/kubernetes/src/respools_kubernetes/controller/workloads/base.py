"""What the controller needs from a kind of workload: how to list it, read its pods' template, hold it,
admit it with a lease's placement, tell whether it finished, and put it back in the queue."""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from kubernetes.client import ApiClient

Obj = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
"""JSON merge patch (RFC 7386): the same meaning on every API server, where the client's default for a
dict body would be a JSON *Patch*."""


class WorkloadKind(abc.ABC):
    kind: ClassVar[str]
    """The API kind, e.g. ``Job``; used in Events' involvedObject."""
    api_version: ClassVar[str]
    can_hold_after_creation: ClassVar[bool]
    """Whether an existing, running workload can be held (a Job can be suspended; a Pod cannot be gated
    once created, so it must be created gated, by its author or the webhook)."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client

    @abc.abstractmethod
    def list_call(self) -> Callable[..., Any]:
        """The all-namespaces list method the informer lists and watches with."""

    @abc.abstractmethod
    def template(self, obj: Obj) -> Obj:
        """The pod template (``metadata`` and ``spec``) the workload's pods are made from."""

    def replicas(self, obj: Obj) -> int:
        """Pods that run at once and must be granted together (the gang size)."""
        return 1

    def ignored(self, obj: Obj) -> bool:
        """Objects of this kind that another kind admits (a Job's pods)."""
        return False

    @abc.abstractmethod
    def held(self, obj: Obj) -> bool:
        """Whether the workload is kept from running (suspended, gated)."""

    @abc.abstractmethod
    def hold(self, obj: Obj) -> Obj:
        """Keep the workload from running (where :attr:`can_hold_after_creation`)."""

    @abc.abstractmethod
    def admit(self, obj: Obj, template: Obj, annotations: Mapping[str, str | None], labels: Mapping[str, str]) -> Obj:
        """Write the placed ``template`` (its metadata and scheduling fields) and the workload's own
        ``annotations``/``labels`` (None removes one), and let it run."""

    @abc.abstractmethod
    def finished(self, obj: Obj) -> bool:
        """Succeeded or failed for good: its lease can go."""

    @abc.abstractmethod
    def patch(self, obj: Obj, body: Obj) -> Obj:
        """A merge patch of the workload; the object as the server now has it."""

    def requeues(self, obj: Obj) -> bool:
        """Whether a preempted workload goes back to the queue (else it ends preempted)."""
        return True

    @abc.abstractmethod
    def requeue(self, obj: Obj, template: Obj) -> Obj | None:
        """Make a preempted workload wait again with its original ``template``; the object as it now is
        (None when the workload could not be brought back)."""


def metadata_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    value: dict[str, str] = metadata_of(obj).get("annotations") or {}
    return value


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    value: dict[str, str] = metadata_of(obj).get("labels") or {}
    return value

"""One kind of workload through its lease: submit, wait, admit, heartbeat, preempt, requeue, release.

Everything the controller knows about a workload is in its annotations and in the request they name,
and every request carries the workload's uid as its idempotency key, so a restarted controller (or a
new leader) submits nothing twice and grants nothing twice: it reads where each workload stands and
goes on from there. The capacity of a preempted workload goes back (the lease is released) only once
no pod of its lease is left: never two workloads on one GPU.

The leases of admitted workloads are kept alive by the process's one :class:`LeaseKeeper` (a batch
heartbeat and one watch for all of them) rather than a heartbeat per workload per pass; a pass looks at
the service for a workload only when the keeper does not keep its lease (just admitted, adopted after a
restart or a change of leader) or heard of its notice or end.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from respools import ApiError, Client
from respools.backends.protocol import BackendError
from respools.client.keeper import LeaseKeeper
from respools.model import (
    LIVE_LEASE_STATES,
    TERMINAL_STATES,
    Host,
    Lease,
    Request,
    RequestSpec,
    RequestState,
    is_mig_key,
    mig_profile,
)
from respools_kubernetes.api_json import from_api_json, to_api_json
from respools_kubernetes.backend import KubernetesBackend
from respools_kubernetes.controller import names
from respools_kubernetes.controller.demand import BadDemand, template_resources
from respools_kubernetes.controller.names import State
from respools_kubernetes.controller.recorder import Recorder
from respools_kubernetes.controller.settings import ControllerSettings
from respools_kubernetes.controller.workloads.base import Obj, WorkloadKind, annotations_of, labels_of, metadata_of
from respools_kubernetes.labels import HOSTNAME_LABEL
from respools_kubernetes.pods import apply_placement

log = logging.getLogger(__name__)

NamespaceLookup = Callable[[str], Obj | None]
_SCHEDULING_FIELDS = ("affinity", "nodeSelector", "tolerations")
_NOT_FOUND = 404
_CLIENT_ERRORS = range(400, 500)


class Admission:
    """Drives the workloads of one kind. ``reconcile`` is idempotent: call it on every change and resync."""

    def __init__(
        self,
        kind: WorkloadKind,
        client: Client,
        core: CoreV1Api,
        recorder: Recorder,
        namespace_of: NamespaceLookup,
        settings: ControllerSettings,
        keeper: LeaseKeeper,
    ) -> None:
        self.kind = kind
        self._client = client
        self._keeper = keeper
        self._kept: dict[str, tuple[str, str]] = {}
        """Lease id → (namespace, name) of the workload whose lease the keeper keeps."""
        self._ttls: dict[str, float] = {}
        """Pool → its lease TTL, read once per pool (it sets the keeper's pace)."""
        self._core = core
        self._recorder = recorder
        self._namespace_of = namespace_of
        self._settings = settings
        self._backend = KubernetesBackend()
        self._gone: dict[str, Obj] = {}
        """Deleted workloads whose request is still open, by request id, until their pods are gone."""
        self._killed: set[str] = set()
        """Pods (uid) deleted at their deadline with no grace left."""

    # -- entry points ------------------------------------------------------------------------------

    def reconcile(self, obj: Obj) -> Obj:
        """Move one workload on; the object as it now is."""
        if self.kind.ignored(obj) or metadata_of(obj).get("deletionTimestamp"):
            return obj
        request_id = annotations_of(obj).get(names.REQUEST_ID)
        if request_id is None:
            pool = self._label(obj, names.POOL)
            if (
                pool is None
                or self.kind.finished(obj)
                or annotations_of(obj).get(names.STATE)
                in (
                    State.REJECTED,
                    State.UNGATED,
                )
            ):
                return obj
            return self._submit(obj, pool)
        if self.kind.finished(obj):
            return self._finish(obj, request_id)
        return self._follow(obj, request_id)

    def deleted(self, obj: Obj) -> None:
        """The workload is gone from the cluster: its request ends once its pods have gone too."""
        request_id = annotations_of(obj).get(names.REQUEST_ID)
        if request_id is not None and annotations_of(obj).get(names.STATE) not in (State.FINISHED,):
            self._gone[request_id] = obj

    def settle_deleted(self) -> None:
        """Release or cancel the requests of deleted workloads whose pods are all gone."""
        for request_id, obj in list(self._gone.items()):
            try:
                if self._settle(request_id, obj):
                    del self._gone[request_id]
            except (ApiError, ApiException) as exc:
                log.warning("deleted %s %s: %s", self.kind.kind, _name(obj), exc)

    def open_requests(self) -> set[str]:
        return set(self._gone)

    def workload_of(self, lease_id: str) -> tuple[str, str] | None:
        """The (namespace, name) of the workload whose lease ``lease_id`` is, when the keeper keeps it."""
        return self._kept.get(lease_id)

    def forget_kept(self) -> None:
        """No longer leading: stop keeping the leases (the next leader adopts them)."""
        for lease_id in list(self._kept):
            self._keeper.remove(lease_id)
        self._kept.clear()

    # -- submit ------------------------------------------------------------------------------------

    def _submit(self, obj: Obj, pool: str) -> Obj:
        try:
            resources = template_resources(self.kind.template(obj))
        except BadDemand as exc:
            return self._reject(self._hold(obj), str(exc))
        if not resources:
            return obj  # not a GPU workload
        if not self.kind.held(obj):
            if not self.kind.can_hold_after_creation:
                message = (
                    f"this {self.kind.kind} was created without the {names.SCHEDULING_GATE} scheduling gate, so it "
                    "runs without a lease; create it gated or install the respools webhook"
                )
                return self._set_status(obj, State.UNGATED, message, "NotGated", warning=True)
            obj = self.kind.hold(obj)
        unplaceable = self._unplaceable(pool, resources)
        if unplaceable is not None:
            return self._reject(obj, unplaceable)
        uid = metadata_of(obj).get("uid") or ""
        try:
            spec = RequestSpec(
                subject=self._label(obj, names.SUBJECT),
                resources=resources,
                replicas=self.kind.replicas(obj),
                preemptible=self._value(obj, names.PREEMPTIBLE) != "false",
                priority=int(self._value(obj, names.PRIORITY) or 0),
                pools=[pool],
                max_retries=self._max_retries(obj),
                idempotency_key=f"k8s-{uid}",
                labels={
                    names.MANAGED_BY: names.MANAGED_BY_VALUE,
                    names.WORKLOAD_UID: uid,
                    "k8s-kind": self.kind.kind,
                    "k8s-namespace": metadata_of(obj).get("namespace") or "",
                    "k8s-name": metadata_of(obj).get("name") or "",
                },
            )
        except (ValidationError, ValueError) as exc:
            return self._reject(obj, f"the workload's respools request is invalid: {_first_error(exc)}")
        try:
            request = self._client.submit(spec)
        except ApiError as exc:
            if exc.status in _CLIENT_ERRORS:
                return self._reject(obj, f"respools refused the request: {exc}")
            raise
        obj = self.kind.patch(obj, {"metadata": {"annotations": {names.REQUEST_ID: request.id, names.ATTEMPT: "0"}}})
        return self._follow(obj, request.id, request)

    def _unplaceable(self, pool: str, resources: dict[str, float]) -> str | None:
        """Why no node of the pool could ever run one of the pods, or None.

        A pod runs on one node, so a pod asking for more GPUs (or a MIG profile) than any node of the pool
        has would wait forever in a pool whose total is large enough; it is refused at once instead. A
        pool whose inventory is not known yet is given the benefit of the doubt.
        """
        hosts = [Host.model_validate(entry["host"]) for entry in self._client.get(f"/v1/pools/{pool}/hosts")]
        if not hosts:
            return None
        whole = resources.get("gpu", 0)
        most = max(sum(1 for gpu in host.gpus if not gpu.mig_enabled) for host in hosts)
        if whole >= 1 and whole > most:
            return (
                f"each pod asks for {whole:g} GPUs but the largest node of pool {pool!r} has {most}; "
                "ask for at most that many per pod (a Job with parallelism spreads over nodes)"
            )
        for key, amount in resources.items():
            if not is_mig_key(key):
                continue
            profile = mig_profile(key)
            per_host = [
                sum(1 for gpu in host.gpus for mig in gpu.mig_instances if mig.profile == profile) for host in hosts
            ]
            if max(per_host) < amount:
                offered = sorted({mig.profile for host in hosts for gpu in host.gpus for mig in gpu.mig_instances})
                return (
                    f"each pod asks for {amount:g} MIG slices {profile!r} but no node of pool {pool!r} has that "
                    f"many; the pool's nodes offer {', '.join(offered) or 'no MIG slices'}"
                )
        return None

    # -- follow ------------------------------------------------------------------------------------

    def _follow(self, obj: Obj, request_id: str, request: Request | None = None) -> Obj:
        applied = annotations_of(obj).get(names.LEASE_ID)
        if applied and annotations_of(obj).get(names.STATE) in (State.ADMITTED, State.PREEMPTING):
            if self._keeper.keeps(applied):
                if not self._keeper.noticed(applied):
                    return obj  # renewed and watched by the keeper, which says when that changes
            else:
                self._kept.pop(applied, None)  # ended, as the keeper heard: the heartbeat below says how
            lease = self._heartbeat(applied)
            if lease is not None and lease.state == RequestState.PREEMPTING:
                return self._preempt(obj, lease)
            if lease is not None and lease.state in LIVE_LEASE_STATES:
                self._keep(obj, lease)
                return obj
            # The lease ended without us (expired, revoked at its deadline) or is overdue: nothing may run
            # on it any more. Hold the workload so that no new pod starts, stop the ones left, and only
            # then give back what the service still counts as held (the stop is confirmed).
            obj = self._hold(obj)
            if self._stop_lease_pods(metadata_of(obj).get("namespace") or "", applied, deadline=None):
                return obj
            if lease is not None and lease.state not in TERMINAL_STATES:
                self._release(lease.id)
        request = request or self._client.get_request(request_id)
        if request.state == RequestState.PENDING:
            if applied:
                return self._requeue(obj, request)
            return self._set_status(obj, State.WAITING, _waiting(request), "Waiting")
        if request.state in LIVE_LEASE_STATES and request.lease_id:
            if applied == request.lease_id and not self.kind.held(obj):
                return obj
            return self._admit(obj, request)
        if request.state == RequestState.REJECTED:
            return self._reject(obj, request.reason or "rejected by respools")
        if request.state == RequestState.PREEMPTED:
            return self._set_status(obj, State.PREEMPTED, request.reason or "preempted", "Preempted", warning=True)
        return self._set_status(obj, State.FINISHED, request.reason or request.state.value, "LeaseEnded")

    def _admit(self, obj: Obj, request: Request) -> Obj:
        assert request.lease_id is not None
        lease = self._client.get_lease(request.lease_id)
        pool = self._client.get_pool(lease.pool)
        try:
            fragments: list[dict[str, Any]] = self._backend.realize(lease, pool).native["pods"]
        except BackendError as exc:
            self._client.release(lease.id)
            self._client.cancel_request(request.id)
            return self._reject(obj, str(exc))
        original = self._original_template(obj)
        placed = _place(original, fragments)
        if len(lease.placement.hosts) > 1:
            _spread(placed, lease.id)
        hosts = ", ".join(lease.placement.hosts) or "any node of the pool"
        notes = {
            names.LEASE_ID: lease.id,
            names.STATE: State.ADMITTED,
            names.REASON: f"granted lease {lease.id} on {hosts}",
            names.ATTEMPT: str(lease.attempt),
            names.ORIGINAL_SCHEDULING: json.dumps(_scheduling(original), sort_keys=True),
            names.PREEMPT_DEADLINE: None,
            names.PREEMPT_REASON: None,
        }
        obj = self.kind.admit(obj, placed, notes, {names.LEASE_ID: lease.id})
        started = self._heartbeat(lease.id)  # starts the lease; the keeper renews it from here on
        if started is not None and started.state in LIVE_LEASE_STATES:
            self._keep(obj, started, pool.lease_ttl_s)
        self._event(obj, "Admitted", f"respools lease {lease.id} granted in pool {lease.pool} on {hosts}")
        return obj

    # -- preemption and requeue --------------------------------------------------------------------

    def _preempt(self, obj: Obj, lease: Lease) -> Obj:
        deadline = lease.preempt_deadline or datetime.now(UTC)
        reason = lease.preempt_reason.value if lease.preempt_reason else "preempted"
        if self.kind.can_hold_after_creation and not self.kind.held(obj):
            obj = self.kind.hold(obj)  # a suspended Job is not failed, and makes no new pods
        if annotations_of(obj).get(names.STATE) != State.PREEMPTING:
            message = f"lease {lease.id} preempted ({reason}); its pods stop by {deadline.isoformat()}"
            obj = self.kind.patch(
                obj,
                {
                    "metadata": {
                        "annotations": {
                            names.STATE: State.PREEMPTING,
                            names.REASON: message,
                            names.PREEMPT_DEADLINE: deadline.isoformat(),
                            names.PREEMPT_REASON: reason,
                        }
                    }
                },
            )
            self._event(obj, "Preempted", message, warning=True)
        if self._stop_lease_pods(metadata_of(obj).get("namespace") or "", lease.id, deadline):
            return obj  # the capacity stays held until the pods are gone
        self._release(lease.id)
        return self._after_preemption(obj, self._client.get_request(lease.request_id))

    def _after_preemption(self, obj: Obj, request: Request) -> Obj:
        if request.state not in TERMINAL_STATES:  # requeued (and perhaps granted again already)
            return self._requeue(obj, request)
        return self._set_status(obj, State.PREEMPTED, request.reason or "preempted", "Preempted", warning=True)

    def _requeue(self, obj: Obj, request: Request) -> Obj:
        if not self.kind.requeues(obj):
            self._client.cancel_request(request.id)
            message = f'preempted; not requeued (set {names.REQUEUE}: "true" to requeue a Pod)'
            self._event(obj, "Preempted", message, warning=True)
            return obj
        requeued = self.kind.requeue(obj, self._original_template(obj))
        if requeued is None:
            return obj  # the old Pod still exists; the next pass creates it again
        message = request.reason or f"requeued (attempt {request.attempt})"
        requeued = self.kind.patch(
            requeued,
            {
                "metadata": {
                    "labels": {names.LEASE_ID: None},
                    "annotations": {
                        names.STATE: State.REQUEUED,
                        names.REASON: message,
                        names.ATTEMPT: str(request.attempt),
                        names.LEASE_ID: None,
                        names.PREEMPT_DEADLINE: None,
                        names.PREEMPT_REASON: None,
                    },
                }
            },
        )
        self._event(requeued, "Requeued", message)
        return requeued

    def _stop_lease_pods(self, namespace: str, lease_id: str, deadline: datetime | None) -> bool:
        """Delete the lease's pods (with the grace left before ``deadline``; none without one); whether any
        is still there."""
        pods = self._core.list_namespaced_pod(namespace, label_selector=f"{names.LEASE_ID}={lease_id}").items
        pods = [pod for pod in pods if (pod.metadata.labels or {}).get(names.LEASE_ID) == lease_id]
        left = (deadline - datetime.now(UTC)).total_seconds() if deadline is not None else 0.0
        for pod in pods:
            uid = pod.metadata.uid or pod.metadata.name
            if left > 0:
                if pod.metadata.deletion_timestamp is not None:
                    continue  # already told; it has its grace
                grace = max(1, math.ceil(left))
            elif uid in self._killed:
                continue
            else:
                grace = 0
                self._killed.add(uid)
            try:
                self._core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=grace)
            except ApiException as exc:
                if exc.status != _NOT_FOUND:
                    raise
        return bool(pods)

    # -- ends --------------------------------------------------------------------------------------

    def _finish(self, obj: Obj, request_id: str) -> Obj:
        if annotations_of(obj).get(names.STATE) == State.FINISHED:
            return obj
        self.close(request_id)
        return self._set_status(obj, State.FINISHED, "the workload finished; its lease is released", "Finished")

    def _settle(self, request_id: str, obj: Obj) -> bool:
        lease_id = annotations_of(obj).get(names.LEASE_ID)
        namespace = metadata_of(obj).get("namespace") or ""
        if lease_id:
            lease = self._heartbeat(lease_id)
            deadline = lease.preempt_deadline if lease is not None and lease.state == RequestState.PREEMPTING else None
            if self._stop_lease_pods(namespace, lease_id, deadline):
                return False
        request = self._client.get_request(request_id)
        preempted = annotations_of(obj).get(names.STATE) == State.PREEMPTING
        if preempted and request.lease_id and request.state == RequestState.PREEMPTING:
            self._release(request.lease_id)
            request = self._client.get_request(request_id)
        if preempted and request.state not in TERMINAL_STATES and self.kind.requeues(obj):
            # Requeued by the service (perhaps granted again already): bring the workload back.
            return self._requeue(obj, request) is not obj
        self.close(request_id)
        return True

    def close(self, request_id: str) -> None:
        """Release the request's lease, or withdraw it while it waits."""
        request = self._client.get_request(request_id)
        if request.lease_id and request.state in LIVE_LEASE_STATES:
            self._release(request.lease_id)
        elif request.state not in TERMINAL_STATES:
            self._client.cancel_request(request_id)

    # -- helpers -----------------------------------------------------------------------------------

    def _keep(self, obj: Obj, lease: Lease, ttl_s: float | None = None) -> None:
        """Have the keeper renew and watch ``lease`` (just renewed) from now on."""
        if self._keeper.keeps(lease.id):
            return
        if ttl_s is None:
            ttl_s = self._ttls.get(lease.pool) or self._client.get_pool(lease.pool).lease_ttl_s
        self._ttls[lease.pool] = ttl_s
        self._kept[lease.id] = (metadata_of(obj).get("namespace") or "", metadata_of(obj).get("name") or "")
        self._keeper.add_lease(lease, ttl_s)

    def _release(self, lease_id: str) -> None:
        """Release ``lease_id``, the keeper first told to let it go (a release is not news to hear of)."""
        self._keeper.remove(lease_id)
        self._kept.pop(lease_id, None)
        self._client.release(lease_id)

    def _heartbeat(self, lease_id: str) -> Lease | None:
        try:
            return self._client.heartbeat(lease_id)
        except ApiError as exc:
            if exc.status == _NOT_FOUND:
                return None
            if exc.status in _CLIENT_ERRORS:  # an ended lease cannot be renewed
                return self._client.get_lease(lease_id)
            raise

    def _hold(self, obj: Obj) -> Obj:
        if self.kind.can_hold_after_creation and not self.kind.held(obj):
            return self.kind.hold(obj)
        return obj

    def _reject(self, obj: Obj, message: str) -> Obj:
        return self._set_status(obj, State.REJECTED, message, "Rejected", warning=True)

    def _set_status(self, obj: Obj, state: str, reason: str, event: str, *, warning: bool = False) -> Obj:
        """Write state and reason where they changed, with an Event (so a wait is explained once)."""
        current = annotations_of(obj)
        if current.get(names.STATE) == state and current.get(names.REASON) == reason:
            return obj
        obj = self.kind.patch(obj, {"metadata": {"annotations": {names.STATE: state, names.REASON: reason}}})
        self._event(obj, event, reason, warning=warning)
        return obj

    def _event(self, obj: Obj, reason: str, message: str, *, warning: bool = False) -> None:
        self._recorder.event(obj, self.kind.kind, self.kind.api_version, reason, message, warning=warning)

    def _value(self, obj: Obj, key: str) -> str | None:
        """An annotation or label of the workload (its pod template's too)."""
        template_meta = self.kind.template(obj).get("metadata") or {}
        for source in (annotations_of(obj), labels_of(obj), template_meta.get("annotations") or {}):
            if source.get(key) is not None:
                return str(source[key])
        return None

    def _label(self, obj: Obj, key: str) -> str | None:
        """The workload's own label (or annotation), else its namespace's label."""
        value = self._value(obj, key)
        if value is not None:
            return value
        namespace = self._namespace_of(metadata_of(obj).get("namespace") or "")
        found = labels_of(namespace).get(key) if namespace is not None else None
        return str(found) if found is not None else None

    def _max_retries(self, obj: Obj) -> int:
        value = self._value(obj, names.MAX_RETRIES)
        if value is not None:
            return int(value)
        return self._settings.default_max_retries if self.kind.requeues(obj) else 0

    def _original_template(self, obj: Obj) -> Obj:
        """The pod template as its author wrote it, before any admission placed it."""
        template = copy.deepcopy(self.kind.template(obj))
        stored = annotations_of(obj).get(names.ORIGINAL_SCHEDULING)
        spec = template.setdefault("spec", {})
        if stored is not None:
            original = json.loads(stored)
            for field in _SCHEDULING_FIELDS:
                spec[field] = original.get(field)
        meta = template.setdefault("metadata", {})
        meta["labels"] = {k: v for k, v in (meta.get("labels") or {}).items() if k != names.LEASE_ID} or None
        return template


def _place(template: Obj, fragments: list[dict[str, Any]]) -> Obj:
    """The template with the lease's placement merged in. Each fragment pins its pod to one node by
    ``nodeSelector``; a Job's pods share one template, so the granted nodes become one node-affinity
    expression (hostname In [...]) that every pod of the gang satisfies."""
    fragment = copy.deepcopy(fragments[0])
    hosts = sorted({f.get("spec", {}).get("nodeSelector", {}).get(HOSTNAME_LABEL) for f in fragments} - {None})
    spec = fragment.setdefault("spec", {})
    spec.get("nodeSelector", {}).pop(HOSTNAME_LABEL, None)
    if hosts:
        expression = {"key": HOSTNAME_LABEL, "operator": "In", "values": hosts}
        affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        terms = required.setdefault("nodeSelectorTerms", [{}])
        for term in terms:
            term["matchExpressions"] = [*(term.get("matchExpressions") or []), expression]
    pod = from_api_json({"metadata": template.get("metadata") or {}, "spec": template.get("spec") or {}}, "V1Pod")
    placed: Obj = to_api_json(apply_placement(pod, fragment))
    return placed


def _spread(template: Obj, lease_id: str) -> None:
    """One pod of the gang per granted node: respools placed each replica on its own host, and two pods
    on one node would use GPUs the lease does not hold there."""
    affinity = template.setdefault("spec", {}).setdefault("affinity", {})
    term = {
        "labelSelector": {"matchLabels": {names.LEASE_ID: lease_id}},
        "topologyKey": HOSTNAME_LABEL,
    }
    anti = affinity.setdefault("podAntiAffinity", {})
    anti["requiredDuringSchedulingIgnoredDuringExecution"] = [
        *(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []),
        term,
    ]


def _scheduling(template: Obj) -> dict[str, Any]:
    spec = template.get("spec") or {}
    return {field: spec.get(field) for field in _SCHEDULING_FIELDS}


def _waiting(request: Request) -> str:
    """Without the queue position, which moves all the time: the annotation and Event change only when
    the reason does."""
    why = request.wait_reason.value if request.wait_reason else "queued"
    detail = f": {request.reason}" if request.reason else ""
    return f"waiting for a respools lease ({why}){detail}"


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
    return str(exc)


def _name(obj: Obj) -> str:
    meta = metadata_of(obj)
    return f"{meta.get('namespace')}/{meta.get('name')}"

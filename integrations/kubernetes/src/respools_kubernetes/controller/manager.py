"""The controller process: informers for Nodes, Namespaces and each workload kind, leader election, and
one loop that acts (only while leading) on what changed, plus a full pass every ``resync_s`` for
heartbeats, deadlines and the inventory.

One thread acts, so no two decisions about a workload ever interleave; informers only fill caches and
queue keys.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from typing import Any

from kubernetes.client import ApiClient, CoordinationV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from respools import Client, RespoolsError
from respools.client.keeper import LeaseKeeper
from respools.model import Request, RequestState
from respools_kubernetes.controller import names
from respools_kubernetes.controller.admission import Admission
from respools_kubernetes.controller.informer import Informer, Key, Obj, key_of
from respools_kubernetes.controller.inventory_sync import InventorySync
from respools_kubernetes.controller.leader import LeaderElector
from respools_kubernetes.controller.recorder import Recorder
from respools_kubernetes.controller.settings import ControllerSettings
from respools_kubernetes.controller.workloads import KINDS

log = logging.getLogger(__name__)

_WAKE = ("", ("", ""))
_SWEEP_EVERY = 20
"""Full passes between sweeps for orphaned requests (the first pass sweeps too)."""
_LEASE_NEWS = "lease"
"""Queue items of this kind name a lease (as the key's name) the keeper heard a notice or end of."""
_KEEPER_STOP_S = 0.5
"""How long stopping waits for the keeper's threads; a watch still in its long-poll ends on its own."""


class Controller:
    def __init__(self, api_client: ApiClient, client: Client, settings: ControllerSettings | None = None) -> None:
        self.settings = settings or ControllerSettings()
        core = CoreV1Api(api_client)
        self._queue: queue.Queue[tuple[str, Key]] = queue.Queue()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._deleted_objects: dict[tuple[str, Key], Obj] = {}
        timeout = self.settings.watch_timeout_s
        self.nodes = Informer("nodes", core.list_node, self._node_changed, timeout)
        self._core = core
        self._namespaces: dict[str, tuple[float, Obj | None]] = {}
        recorder = Recorder(core)
        self.keeper = LeaseKeeper(
            client, ttl_s=self.settings.lease_ttl_s, on_notice=self._lease_news, on_end=self._lease_news
        )
        """Renews and watches the leases of every admitted workload: one batch heartbeat and one watch
        for all of them, where a pass used to heartbeat each."""
        self.admissions: dict[str, Admission] = {}
        self.workloads: dict[str, Informer] = {}
        for kind_type in KINDS:
            kind = kind_type(api_client)
            self.admissions[kind.kind] = Admission(
                kind, client, core, recorder, self.namespace, self.settings, self.keeper
            )
            self.workloads[kind.kind] = Informer(
                kind.kind, kind.list_call(), self._workload_handler(kind.kind), timeout
            )
        self.inventory = InventorySync(client, self.nodes.items, self.settings.host_ttl_s)
        self.elector = LeaderElector(
            CoordinationV1Api(api_client),
            self.settings.namespace,
            self.settings.lease_name,
            self.settings.identity,
            self.settings.lease_duration_s,
        )
        self._client = client
        self.passes = 0
        """Full passes made while leading (tests wait on it)."""

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Controller:
        for informer in (self.nodes, *self.workloads.values()):
            self._spawn(f"informer-{informer.name}", informer.run, self._stopping)
        self.keeper.start()
        self._spawn("controller", self._loop)
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._queue.put(_WAKE)
        for informer in (self.nodes, *self.workloads.values()):
            informer.stop()
        for thread in self._threads:
            # Informers may sit in a quiet watch until its read timeout; they only fill caches, so the
            # acting thread is the one waited for.
            thread.join(timeout=10 if thread.name == "controller" else 0.1)
        self.keeper.stop(timeout=_KEEPER_STOP_S)
        self.elector.resign()

    def run_forever(self) -> None:
        self.start()
        try:
            while not self._stopping.wait(1.0):
                pass
        finally:
            self.stop()

    def _spawn(self, name: str, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- informer callbacks (informer threads) -----------------------------------------------------

    def _workload_handler(self, kind: str) -> Any:
        def handle(event: str, obj: Obj) -> None:
            if event == "DELETED":
                self._deleted_objects[(kind, key_of(obj))] = obj  # before the key is queued: it is read then
                self._queue.put(("deleted:" + kind, key_of(obj)))
            else:
                self._queue.put((kind, key_of(obj)))

        return handle

    def _lease_news(self, lease_id: str, request: Request | None) -> None:
        """The keeper heard of a notice or an end (on its thread): the workload is looked at now."""
        self._queue.put((_LEASE_NEWS, ("", lease_id)))

    def _node_changed(self, event: str, obj: Obj) -> None:
        self._queue.put(("nodes", key_of(obj)))

    def namespace(self, name: str) -> Obj | None:
        """The namespace (for its labels), read at most once per resync period: namespaces change rarely,
        and a watch over all of them would cost more than these reads."""
        now = time.monotonic()
        cached = self._namespaces.get(name)
        if cached is not None and now - cached[0] < self.settings.resync_s:
            return cached[1]
        try:
            response = self._core.read_namespace(name, _preload_content=False)
            found: Obj | None = json.loads(response.data)
        except (ApiException, HTTPError, ValueError) as exc:
            log.debug("namespace %s not readable: %s", name, exc)
            found = None
        self._namespaces[name] = (now, found)
        return found

    # -- the acting loop ---------------------------------------------------------------------------

    def _synced(self) -> bool:
        return all(i.synced.is_set() for i in (self.nodes, *self.workloads.values()))

    def _loop(self) -> None:
        next_pass = 0.0
        while not self._stopping.is_set():
            timeout = max(0.0, next_pass - time.monotonic())
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                item = None
            if self._stopping.is_set():
                break
            if time.monotonic() >= next_pass:
                next_pass = time.monotonic() + self.settings.resync_s
                self._guard("full pass", self._full_pass)
                continue
            if item is None or item == _WAKE or not self.elector.leading or not self.passes:
                continue
            self._guard(f"{item[0]} {item[1]}", self._act, *item)

    def _full_pass(self) -> None:
        if not self.elector.try_lead():
            for admission in self.admissions.values():
                admission.forget_kept()
            return
        if not self._synced():
            return
        self.inventory.sync()
        if self.passes % _SWEEP_EVERY == 0:
            self._sweep_orphans()
        for kind, informer in self.workloads.items():
            admission = self.admissions[kind]
            for obj in informer.items():
                self._guard(f"{kind} {key_of(obj)}", self._reconcile, kind, obj)
            admission.settle_deleted()
        self.passes += 1

    def _sweep_orphans(self) -> None:
        """Close the open requests of workloads that vanished while no controller watched (a DELETED
        event nobody saw): their leases go back now rather than when their heartbeats time out."""
        open_states = [RequestState.PENDING, RequestState.GRANTED, RequestState.ACTIVE, RequestState.PREEMPTING]
        label = f"{names.MANAGED_BY}={names.MANAGED_BY_VALUE}"
        for request in self._client.list_requests(label=label, states=open_states, limit=1000):
            kind = request.labels.get("k8s-kind", "")
            key = (request.labels.get("k8s-namespace", ""), request.labels.get("k8s-name", ""))
            informer = self.workloads.get(kind)
            if informer is None or informer.get(key) is not None:
                continue
            admission = self.admissions[kind]
            if request.id in admission.open_requests():
                continue  # its deletion is being settled (pods still going)
            log.info("request %s: its %s %s/%s is gone; closing it once its pods are", request.id, kind, *key)
            annotations = {names.REQUEST_ID: request.id, names.LEASE_ID: request.lease_id}
            admission.deleted({"metadata": {"namespace": key[0], "name": key[1], "annotations": annotations}})
        for admission in self.admissions.values():
            admission.settle_deleted()

    def _act(self, what: str, key: Key) -> None:
        if what == "nodes":
            self.inventory.sync()
        elif what == _LEASE_NEWS:
            for kind, admission in self.admissions.items():
                workload = admission.workload_of(key[1])
                obj = self.workloads[kind].get(workload) if workload is not None else None
                if obj is not None:
                    self._reconcile(kind, obj)
        elif what.startswith("deleted:"):
            kind = what.removeprefix("deleted:")
            obj = self._deleted_objects.pop((kind, key), None)
            if obj is not None and self.workloads[kind].get(key) is None:
                self.admissions[kind].deleted(obj)
                self.admissions[kind].settle_deleted()
        else:
            obj = self.workloads[what].get(key)
            if obj is not None:
                self._reconcile(what, obj)

    def _reconcile(self, kind: str, obj: Obj) -> None:
        updated = self.admissions[kind].reconcile(obj)
        if updated is not obj:
            self.workloads[kind].put(updated)

    def _guard(self, what: str, action: Any, *args: Any) -> None:
        """Run one action; a failure is logged and retried on the next pass, never fatal."""
        try:
            action(*args)
        except (RespoolsError, ApiException, HTTPError, OSError, ValueError) as exc:
            log.warning("%s: %s", what, exc)
        except Exception:
            # An object shaped in a way this code did not foresee must not stop the controller for every
            # other workload: log it with its traceback and go on.
            log.exception("%s: unexpected failure", what)

"""Fixtures for the Kubernetes backend's tests.

``apiserver`` runs kmock's Kubernetes emulator on a free loopback port in a background thread, so the real
(synchronous) ``kubernetes`` client talks HTTP to it exactly as it would to a cluster. kmock stores and
serves objects but ignores ``labelSelector`` on lists; the fixture adds that one piece of API behaviour
(equality selectors) so that tests can tell whether the backend selects what it should.

kmock serves no Namespaces: it reads ``/api/v1/namespaces/<name>/...`` as a namespace prefix, so a GET of
``/api/v1/namespaces/ml`` finds no resource. The fixtures answer that one read from the objects stored
under ``objects["v1/namespaces", None, name]`` (a test labels a namespace for a pool by storing it there);
a namespace nobody stored is answered as one with no labels, as every workload's namespace exists.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import kmock
import pytest
from kmock_thread import serve_in_thread
from kubernetes.client import ApiClient, Configuration
from respools_kubernetes import KubernetesBackend
from respools_kubernetes.settings import KubernetesSettings

from respools.model import Lease, PoolSpec

LISTED_RESOURCES = ("v1/nodes", "v1/pods", "batch/v1/jobs")
OTHER_RESOURCES = ("coordination.k8s.io/v1/leases", "v1/events", "v1/namespaces")


@pytest.fixture
def apiserver() -> Iterator[kmock.KubernetesEmulator]:
    """The emulator, with equality label selectors on lists (its lists then answer watches too)."""
    yield from _serve(selecting=True)


@pytest.fixture
def watched_apiserver() -> Iterator[kmock.KubernetesEmulator]:
    """The emulator as it is: lists and watches (which ignore selectors; a client must filter)."""
    yield from _serve(selecting=False)


def _serve(*, selecting: bool) -> Iterator[kmock.KubernetesEmulator]:
    def configure(handler: kmock.KubernetesEmulator) -> None:
        for resource in (*LISTED_RESOURCES, *OTHER_RESOURCES):
            handler.resources[resource] = kmock.ResourceInfo()
        handler[kmock.method.GET, NAMESPACE_READ] << _namespace_read(handler)
        for resource in LISTED_RESOURCES if selecting else ():
            handler[kmock.action.LIST, kmock.resource(resource)] << _selecting_list(handler, resource)

    yield from serve_in_thread(kmock.KubernetesEmulator, configure)


NAMESPACE_READ = re.compile(r"^/api/v1/namespaces/[^/]+$")


def _namespace_read(handler: kmock.KubernetesEmulator) -> Callable[[kmock.Request], dict[str, Any]]:
    namespaces = kmock.resource("v1/namespaces")

    def respond(request: kmock.Request) -> dict[str, Any]:
        name = request.url.path.rsplit("/", 1)[-1]
        for (kind, _, stored_name), obj in handler.objects.items():
            if kind == namespaces and stored_name == name and not obj.deleted:
                raw: dict[str, Any] = obj.raw
                return raw
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}

    return respond


def _selecting_list(handler: kmock.KubernetesEmulator, resource: str) -> Callable[[kmock.Request], dict[str, Any]]:
    wanted = kmock.resource(resource)

    def respond(request: kmock.Request) -> dict[str, Any]:
        selector = dict(term.split("=", 1) for term in request.params.get("labelSelector", "").split(",") if term)
        items = [
            obj.raw
            for (kind, namespace, _), obj in handler.objects.items()
            if kind == wanted
            and not obj.deleted
            and (request.namespace is None or namespace == request.namespace)
            and _matches(obj.raw.get("metadata", {}).get("labels") or {}, selector)
        ]
        return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}

    return respond


def _matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.fixture
def backend(apiserver: kmock.KubernetesEmulator) -> KubernetesBackend:
    """The backend, its API client pointed at the emulator."""
    url = str(apiserver.url).rstrip("/")

    def api_client(settings: KubernetesSettings) -> ApiClient:
        return ApiClient(Configuration(host=url))

    return KubernetesBackend(api_client_factory=api_client)


@pytest.fixture
def make_lease() -> Callable[..., Lease]:
    """``make_lease({"gpu": 0.25}, items=[...])``: a granted lease in wire form (GPUs as decimals)."""

    def make(resources: dict[str, float], items: list[dict[str, Any]] | None = None, **fields: Any) -> Lease:
        now = datetime.now(UTC)
        return Lease.model_validate(
            {
                "id": "lease-1",
                "request_id": "req-1",
                "subject": "team-a",
                "pool": "k8s",
                "stack": "kubernetes",
                "resources": resources,
                "placement": {"items": items or []},
                "state": "granted",
                "preemptible": True,
                "granted_at": now,
                "expires_at": now + timedelta(minutes=1),
                **fields,
            }
        )

    return make


@pytest.fixture
def make_pool() -> Callable[..., PoolSpec]:
    """``make_pool(settings={...}, inventory=[...])``: a kubernetes pool."""

    def make(**fields: Any) -> PoolSpec:
        return PoolSpec.model_validate({"name": "k8s", "stack": "kubernetes", **fields})

    return make

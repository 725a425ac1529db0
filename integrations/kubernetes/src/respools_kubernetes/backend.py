"""The ``kubernetes`` backend: the four verbs of :class:`respools.backends.protocol.Backend`, wired to the
modules that do the work (settings, demand, fragment, pods, inventory, revoke)."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from kubernetes.client import BatchV1Api, CoreV1Api, V1Container, V1ObjectMeta, V1Pod, V1PodSpec

from respools.backends.protocol import Backend, BackendError, Realization
from respools.model import Form, Host, Lease, PoolSpec
from respools_kubernetes.api_json import from_api_json, to_api_json
from respools_kubernetes.client import ApiClientFactory, default_api_client
from respools_kubernetes.demand import forms_used, pod_demands
from respools_kubernetes.fragment import build_fragment
from respools_kubernetes.inventory import host_from_node
from respools_kubernetes.labels import LEASE_LABEL, lease_label_value
from respools_kubernetes.pods import apply_to_pod
from respools_kubernetes.revoke import delete_lease_workload, lease_pods_left
from respools_kubernetes.settings import settings_of

log = logging.getLogger(__name__)

_PAGE_SIZE = 500


class KubernetesBackend(Backend):
    """GPUs as pod resources on a cluster running the NVIDIA device plugin (plus HAMi or Run:ai/KAI for
    fractions). ``realize`` returns one pod fragment per placed host in ``native["pods"]``; merge each into
    the step's pod with :func:`respools_kubernetes.apply_to_pod`."""

    name: ClassVar[str] = "kubernetes"
    forms: ClassVar[frozenset[Form]] = frozenset({Form.WHOLE, Form.MIG, Form.FRACTION})

    def __init__(self, api_client_factory: ApiClientFactory | None = None) -> None:
        self._api_client_factory = api_client_factory or default_api_client

    def validate_pool(self, pool: PoolSpec) -> None:
        super().validate_pool(pool)
        settings = settings_of(pool)
        if pool.forms is not None and Form.FRACTION in pool.forms and settings.fraction_mode is None:
            raise BackendError(
                f"pool {pool.name!r}: fractions on Kubernetes need a GPU sharing layer; set "
                "settings.fraction_mode to 'hami' or 'runai', or drop 'fraction' (whole and mig remain)"
            )
        for index, toleration in enumerate(settings.tolerations):
            if to_api_json(from_api_json(toleration, "V1Toleration")) != toleration:
                raise BackendError(
                    f"pool {pool.name!r}: settings.tolerations[{index}] has fields a Toleration does not have "
                    "(use key, operator, value, effect, tolerationSeconds)"
                )

    def effective_forms(self, pool: PoolSpec) -> frozenset[Form]:
        """Fractions only where the pool names the sharing layer that expresses them."""
        forms = super().effective_forms(pool)
        if settings_of(pool).fraction_mode is None:
            return forms - {Form.FRACTION}
        return forms

    def discover(self, pool: PoolSpec) -> list[Host]:
        """GPU nodes matching the pool's ``node_selector``, as hosts; nodes without GPUs are left out."""
        settings = settings_of(pool)
        selector = ",".join(f"{key}={value}" for key, value in sorted(settings.node_selector.items()))
        hosts: list[Host] = []
        with self._api_client_factory(settings) as api_client:
            core = CoreV1Api(api_client)
            token: str | None = None
            while True:
                options: dict[str, Any] = {"limit": _PAGE_SIZE}
                if selector:
                    options["label_selector"] = selector
                if token:
                    options["_continue"] = token
                page = core.list_node(**options)
                hosts += [host for node in page.items if (host := host_from_node(node, settings)) is not None]
                token = page.metadata._continue if page.metadata else None
                if not token:
                    break
        return sorted(hosts, key=lambda host: host.name)

    def realize(self, lease: Lease, pool: PoolSpec) -> Realization:
        settings = settings_of(pool)
        demands = pod_demands(lease, pool)
        supported = self.effective_forms(pool)
        missing = sorted(forms_used(demands) - supported)
        if missing:
            raise BackendError(
                f"pool {pool.name!r} on stack 'kubernetes' cannot express {', '.join(missing)}; "
                f"it supports {', '.join(sorted(supported))}"
            )
        fragments: list[dict[str, Any]] = []
        notes: list[str] = []
        for demand in demands:
            fragment, fragment_notes = build_fragment(demand, lease, pool, settings)
            apply_to_pod(_probe_pod(), fragment)  # the fragment must merge into a pod and read back cleanly
            fragments.append(fragment)
            notes += [note for note in fragment_notes if note not in notes]
        env = {var["name"]: var["value"] for fragment in fragments for var in fragment["container"]["env"]}
        return Realization(backend=self.name, env=env, native={"pods": fragments}, notes=notes)

    def stop(self, lease: Lease, pool: PoolSpec) -> None:
        settings = settings_of(pool)
        with self._api_client_factory(settings) as api_client:
            deleted = delete_lease_workload(
                CoreV1Api(api_client), BatchV1Api(api_client), settings.namespace, lease_label_value(lease.id)
            )
        if deleted:
            log.info("lease %s stopped: deleted %s", lease.id, ", ".join(str(d) for d in deleted))
        else:
            log.info("lease %s: no pods left in namespace %s", lease.id, settings.namespace)

    def confirm_stopped(self, lease: Lease, pool: PoolSpec) -> str | None:
        """The stop is confirmed once no pod of the lease is left, terminating ones included (DESIGN
        §2.8: the service hands an overdue lease's GPUs over only then)."""
        settings = settings_of(pool)
        label = lease_label_value(lease.id)
        with self._api_client_factory(settings) as api_client:
            left = lease_pods_left(CoreV1Api(api_client), settings.namespace, label)
        if left:
            return None
        return f"no pod labelled {LEASE_LABEL}={label} is left in namespace {settings.namespace}"


def _probe_pod() -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(name="respools-probe"),
        spec=V1PodSpec(containers=[V1Container(name="step", image="busybox")]),
    )

"""A pod's demand spelled in the cluster's terms: the *pod fragment*.

A fragment is the part of a pod that respools owns, as the Kubernetes API's JSON::

    {"host": "gpu-node-1",                       # informative; the pinning is in spec
     "metadata": {"labels": {...}, "annotations": {...}},
     "spec": {"nodeSelector": {...}, "affinity": {...}, "tolerations": [...], "schedulerName": "..."},
     "container": {"resources": {"limits": {...}}, "env": [...]}}

:func:`respools_kubernetes.pods.apply_to_pod` merges it into the step's own pod. The pieces are built from
the ``kubernetes`` client's models, so only fields the API has can appear.

How each form is spelled (DESIGN §3):

- whole GPUs: ``nvidia.com/gpu: N``;
- MIG, device plugin *mixed* strategy: ``nvidia.com/mig-<profile>: N``; *single* strategy: ``nvidia.com/gpu: N``
  on a node whose ``nvidia.com/gpu.product`` is ``<model>-MIG-<profile>`` (matched in every spelling);
- fraction, HAMi: ``nvidia.com/gpu: 1`` with ``nvidia.com/gpumem: <MiB>`` (or ``gpumem-percentage`` where
  the memory is unknown, never both) and ``nvidia.com/use-gpuuuid`` pinning the placed GPU;
- fraction, Run:ai/KAI: the ``gpu-fraction`` annotation and the Run:ai scheduler.

Every pod is pinned to its placed host (``kubernetes.io/hostname``) and tolerates the GPU taint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import (
    V1Affinity,
    V1EnvVar,
    V1NodeAffinity,
    V1NodeSelector,
    V1NodeSelectorRequirement,
    V1NodeSelectorTerm,
    V1ResourceRequirements,
    V1Toleration,
)

from respools.backends.protocol import BackendError
from respools.model import MILLI, Lease, PoolSpec
from respools_kubernetes.api_json import from_api_json, to_api_json
from respools_kubernetes.caps import LEASE_ID_ENV, format_share, unenforced_fraction_env
from respools_kubernetes.demand import Fraction, PodDemand
from respools_kubernetes.labels import (
    HOSTNAME_LABEL,
    LEASE_LABEL,
    POOL_ANNOTATION,
    PRODUCT_LABEL,
    SUBJECT_ANNOTATION,
    lease_label_value,
    mig_product_label_values,
)
from respools_kubernetes.settings import KubernetesSettings

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
HAMI_MEMORY_RESOURCE = "nvidia.com/gpumem"
HAMI_MEMORY_PERCENTAGE_RESOURCE = "nvidia.com/gpumem-percentage"
HAMI_UUID_ANNOTATION = "nvidia.com/use-gpuuuid"
RUNAI_FRACTION_ANNOTATION = "gpu-fraction"
RUNAI_SCHEDULER = "runai-scheduler"
NVIDIA_UUID_PREFIX = "GPU-"


def mig_resource(profile: str) -> str:
    return f"{MIG_RESOURCE_PREFIX}{profile}"


def gpu_toleration() -> V1Toleration:
    """GPU nodes are commonly tainted ``nvidia.com/gpu:NoSchedule`` to keep CPU pods off them."""
    return V1Toleration(key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")


@dataclass
class _Spelling:
    """What a demand becomes, accumulated form by form."""

    limits: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    requirements: list[V1NodeSelectorRequirement] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    scheduler_name: str | None = None
    notes: list[str] = field(default_factory=list)


def build_fragment(
    demand: PodDemand, lease: Lease, pool: PoolSpec, settings: KubernetesSettings
) -> tuple[dict[str, Any], list[str]]:
    """The fragment for one pod of ``lease``, and notes for the person reading the realization."""
    spelling = _Spelling(
        annotations={LEASE_LABEL: lease.id, POOL_ANNOTATION: pool.name, SUBJECT_ANNOTATION: lease.subject},
        node_selector=dict(settings.node_selector),
        env={LEASE_ID_ENV: lease.id},
        scheduler_name=settings.scheduler_name,
    )
    if demand.host is not None:
        spelling.node_selector[HOSTNAME_LABEL] = _hostname_label(pool, demand.host)
    if demand.whole:
        spelling.limits[GPU_RESOURCE] = str(demand.whole)
    if demand.mig:
        _spell_mig(spelling, demand, pool, settings)
    if demand.fraction is not None:
        _spell_fraction(spelling, demand.fraction, settings)
    return _assemble(spelling, demand.host, lease, settings), spelling.notes


def _hostname_label(pool: PoolSpec, host: str) -> str:
    """The node's ``kubernetes.io/hostname`` as discovered (it can differ from the node name)."""
    for inventory_host in pool.inventory or []:
        if inventory_host.name == host:
            return inventory_host.labels.get(HOSTNAME_LABEL, host)
    return host


def _spell_mig(spelling: _Spelling, demand: PodDemand, pool: PoolSpec, settings: KubernetesSettings) -> None:
    count = sum(n for _, n in demand.mig)
    if count > 1:
        spelling.notes.append(
            f"{count} MIG slices: a CUDA process sees at most one MIG device, so run one process per slice"
        )
    if settings.mig_strategy == "mixed":
        for profile, n in demand.mig:
            spelling.limits[mig_resource(profile)] = str(n)
        return
    # Single strategy: every slice is an nvidia.com/gpu; only the node's product label says which profile.
    if len(demand.mig) > 1 or demand.whole:
        raise BackendError(
            "under the device plugin's single MIG strategy a pod's nvidia.com/gpu devices are all one MIG "
            "profile, so one pod cannot hold several profiles or whole GPUs next to slices; "
            "use mig_strategy 'mixed' or ask for one profile"
        )
    profile, n = demand.mig[0]
    models = list(demand.models) or settings.gpu_products
    if not models:
        raise BackendError(
            f"pool {pool.name!r}: selecting single-strategy MIG nodes needs the GPU model "
            f"('<model>-MIG-{profile}'); give the pool an inventory or settings.gpu_products"
        )
    products = sorted({value for model in models for value in mig_product_label_values(model, profile)})
    spelling.limits[GPU_RESOURCE] = str(n)
    spelling.requirements.append(V1NodeSelectorRequirement(key=PRODUCT_LABEL, operator="In", values=products))


def _spell_fraction(spelling: _Spelling, fraction: Fraction, settings: KubernetesSettings) -> None:
    if settings.fraction_mode == "hami":
        _spell_hami(spelling, fraction)
    elif settings.fraction_mode == "runai":
        _spell_runai(spelling, fraction, settings)
    else:
        raise BackendError(
            "this pool has no GPU sharing layer (settings.fraction_mode is unset), so it cannot express "
            "fractions; set fraction_mode to 'hami' or 'runai', or ask for whole GPUs or MIG slices"
        )


def _spell_hami(spelling: _Spelling, fraction: Fraction) -> None:
    spelling.limits[GPU_RESOURCE] = "1"
    if fraction.memory_mb is not None:
        spelling.limits[HAMI_MEMORY_RESOURCE] = str(fraction.memory_mb)
    else:
        # HAMi takes gpumem or gpumem-percentage, never both; the percentage only where MiB are unknown.
        spelling.limits[HAMI_MEMORY_PERCENTAGE_RESOURCE] = str(max(1, fraction.milli * 100 // MILLI))
    if fraction.gpu_uuid is not None and fraction.gpu_uuid.startswith(NVIDIA_UUID_PREFIX):
        spelling.annotations[HAMI_UUID_ANNOTATION] = fraction.gpu_uuid
    else:
        spelling.notes.append(
            "the placed GPU has no NVIDIA UUID (inventory from node labels, not HAMi's device list), so "
            "HAMi picks the GPU on the node; memory is still capped"
        )


def _spell_runai(spelling: _Spelling, fraction: Fraction, settings: KubernetesSettings) -> None:
    spelling.annotations[RUNAI_FRACTION_ANNOTATION] = format_share(fraction.milli / MILLI)
    spelling.scheduler_name = settings.scheduler_name or RUNAI_SCHEDULER
    spelling.env.update(unenforced_fraction_env(fraction))
    spelling.notes.append(
        "Run:ai/KAI fractions are scheduled, not memory-enforced: the pod carries its caps in RESPOOLS_GPU_* "
        "and framework variables, and the scheduler, not respools, picks the GPU on the node"
    )


def _assemble(spelling: _Spelling, host: str | None, lease: Lease, settings: KubernetesSettings) -> dict[str, Any]:
    tolerations = [gpu_toleration(), *from_api_json(settings.tolerations, "list[V1Toleration]")]
    spec: dict[str, Any] = {"tolerations": to_api_json(tolerations)}
    if spelling.node_selector:
        spec["nodeSelector"] = dict(sorted(spelling.node_selector.items()))
    if spelling.requirements:
        term = V1NodeSelectorTerm(match_expressions=spelling.requirements)
        required = V1NodeSelector(node_selector_terms=[term])
        affinity = V1Affinity(
            node_affinity=V1NodeAffinity(required_during_scheduling_ignored_during_execution=required)
        )
        spec["affinity"] = to_api_json(affinity)
    if spelling.scheduler_name:
        spec["schedulerName"] = spelling.scheduler_name
    env = [V1EnvVar(name=name, value=value) for name, value in sorted(spelling.env.items())]
    return {
        "host": host,
        "metadata": {
            "labels": {LEASE_LABEL: lease_label_value(lease.id)},
            "annotations": dict(sorted(spelling.annotations.items())),
        },
        "spec": spec,
        "container": {
            "resources": to_api_json(V1ResourceRequirements(limits=dict(sorted(spelling.limits.items())))),
            "env": to_api_json(env),
        },
    }

"""A Vertex pool's capacity: the project's custom-training GPU quota for its accelerator and region.

Quota is read from the Cloud Quotas API (``cloudquotas.googleapis.com``, v1 REST, listing the
``aiplatform.googleapis.com`` service's quota infos) with the ambient Google credentials. The reader is a
plain callable so that a pool can state its quota in settings instead, and tests can point it elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import google.auth
import requests
from google.auth.transport.requests import AuthorizedSession

from respools.backends.protocol import BackendError
from respools_vertex.settings import VertexSettings

QuotaSource = Callable[[VertexSettings, str], int]
"""(settings, accelerator) → GPUs the project may use for custom training in ``settings.region``."""

SERVICE = "aiplatform.googleapis.com"
CLOUD_QUOTAS = "https://cloudquotas.googleapis.com"
_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
_PAGE_SIZE = 500

TRAINING_QUOTA_METRICS = {
    "NVIDIA_TESLA_T4": "custom_model_training_nvidia_t4_gpus",
    "NVIDIA_TESLA_V100": "custom_model_training_nvidia_v100_gpus",
    "NVIDIA_L4": "custom_model_training_nvidia_l4_gpus",
    "NVIDIA_TESLA_A100": "custom_model_training_nvidia_a100_gpus",
    "NVIDIA_A100_80GB": "custom_model_training_nvidia_a100_80gb_gpus",
    "NVIDIA_H100_80GB": "custom_model_training_nvidia_h100_gpus",
    "NVIDIA_H200_141GB": "custom_model_training_nvidia_h200_gpus",
}
"""Vertex's on-demand training quota metric per accelerator; Spot quota inserts ``preemptible_``. Other
accelerators need ``settings.quota_metric`` (or ``settings.gpu_quota``)."""


def quota_metric(accelerator: str, settings: VertexSettings) -> str:
    """The full metric name, e.g. ``aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus``."""
    if settings.quota_metric is not None:
        name = settings.quota_metric
    elif accelerator in TRAINING_QUOTA_METRICS:
        name = TRAINING_QUOTA_METRICS[accelerator]
        if settings.spot:
            name = name.replace("custom_model_training_", "custom_model_training_preemptible_", 1)
    else:
        raise BackendError(
            f"respools knows no Vertex quota metric for {accelerator}; set settings.quota_metric "
            "or state the quota in settings.gpu_quota"
        )
    return name if "/" in name else f"{SERVICE}/{name}"


class CloudQuotas:
    """Reads quota from the Cloud Quotas API; ``session_factory`` gives an authorized HTTP session
    (default: the ambient Google credentials)."""

    def __init__(
        self, session_factory: Callable[[], requests.Session] | None = None, endpoint: str = CLOUD_QUOTAS
    ) -> None:
        self._session_factory = session_factory or _ambient_session
        self._endpoint = endpoint.rstrip("/")

    def __call__(self, settings: VertexSettings, accelerator: str) -> int:
        if settings.project is None:
            raise BackendError("reading Vertex quota needs settings.project (or state it in settings.gpu_quota)")
        metric = quota_metric(accelerator, settings)
        infos = [info for info in self._quota_infos(settings.project) if info.get("metric") == metric]
        if not infos:
            raise BackendError(f"project {settings.project!r} shows no quota {metric}")
        return region_limit(infos, settings.region, metric)

    def _quota_infos(self, project: str) -> Iterator[Mapping[str, Any]]:
        url = f"{self._endpoint}/v1/projects/{project}/locations/global/services/{SERVICE}/quotaInfos"
        session = self._session_factory()
        token = ""
        while True:
            params: dict[str, str | int] = {"pageSize": _PAGE_SIZE}
            if token:
                params["pageToken"] = token
            response = session.get(url, params=params)
            response.raise_for_status()
            page = response.json()
            yield from page.get("quotaInfos", [])
            token = page.get("nextPageToken", "")
            if not token:
                return


def region_limit(infos: list[Mapping[str, Any]], region: str, metric: str) -> int:
    """The limit for ``region``: its own dimension where one exists, else the default (no dimensions)."""
    default: int | None = None
    for info in infos:
        for dimension in info.get("dimensionsInfos", []):
            dimensions = dimension.get("dimensions", {})
            value = int(dimension.get("details", {}).get("value", 0))
            if dimensions.get("region") == region:
                return _bounded(value, metric)
            if not dimensions:
                default = value
    if default is None:
        raise BackendError(f"quota {metric} has no limit for region {region!r}")
    return _bounded(default, metric)


def _bounded(value: int, metric: str) -> int:
    if value < 0:
        raise BackendError(f"quota {metric} is unlimited; bound the pool with settings.gpu_quota")
    return value


def _ambient_session() -> requests.Session:
    credentials, _ = google.auth.default(scopes=_SCOPES)
    return AuthorizedSession(credentials)  # type: ignore[no-untyped-call]  # google-auth leaves it unannotated

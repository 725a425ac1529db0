"""Pool capacity from quota: stated in settings, or read from the Cloud Quotas REST API over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kmock
import pytest
import requests
from respools_vertex import CloudQuotas, VertexBackend, VertexSettings
from respools_vertex.quota import quota_metric

from respools.backends.protocol import BackendError
from respools.model import PoolSpec

MakePool = Callable[..., PoolSpec]

QUOTA_INFOS = "/v1/projects/ml-prod/locations/global/services/aiplatform.googleapis.com/quotaInfos"
A100_METRIC = "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"


def quota_info(metric: str, *limits: tuple[str | None, str]) -> dict[str, Any]:
    """A QuotaInfo as the API returns it: one dimensions info per region (None: the default limit)."""
    return {
        "name": f"projects/123/locations/global/services/aiplatform.googleapis.com/quotaInfos/{metric}",
        "metric": metric,
        "dimensionsInfos": [
            {"dimensions": {"region": region} if region else {}, "details": {"value": value}}
            for region, value in limits
        ],
    }


def cloud_quotas(google_api: kmock.RawHandler) -> CloudQuotas:
    return CloudQuotas(session_factory=requests.Session, endpoint=str(google_api.url))


def test_quota_stated_in_settings_is_the_capacity_without_asking_google(make_pool: MakePool) -> None:
    def no_network(settings: VertexSettings, accelerator: str) -> int:
        raise AssertionError("the quota API must not be called when settings state the quota")

    capacity = VertexBackend(quota_source=no_network).capacity(make_pool(settings={"gpu_quota": 16}))

    assert capacity == {"gpu": 16_000}


def test_the_injected_quota_source_gets_the_pools_accelerator(make_pool: MakePool) -> None:
    asked: list[tuple[str, str]] = []

    def source(settings: VertexSettings, accelerator: str) -> int:
        asked.append((settings.region, accelerator))
        return 8

    pool = make_pool(settings={"region": "europe-west4", "accelerator_type": None}, gpu_class="h100")
    assert VertexBackend(quota_source=source).capacity(pool) == {"gpu": 8_000}
    assert asked == [("europe-west4", "NVIDIA_H100_80GB")]
    assert VertexBackend().discover(pool) == []


def test_cloud_quotas_reads_the_regions_limit_across_pages(google_api: kmock.RawHandler, make_pool: MakePool) -> None:
    first = {
        "quotaInfos": [quota_info("aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus", (None, "4"))],
        "nextPageToken": "page-2",
    }
    second = {"quotaInfos": [quota_info(A100_METRIC, (None, "0"), ("us-central1", "16"), ("us-east4", "8"))]}
    google_api[f"get {QUOTA_INFOS}", lambda request: request.params.get("pageToken") == "page-2"] << second
    google_api[f"get {QUOTA_INFOS}"] << first

    capacity = VertexBackend(quota_source=cloud_quotas(google_api)).capacity(make_pool())

    assert capacity == {"gpu": 16_000}
    assert [request.params.get("pageToken") for request in google_api] == [None, "page-2"]


def test_a_region_without_its_own_limit_gets_the_default(google_api: kmock.RawHandler, make_pool: MakePool) -> None:
    google_api[f"get {QUOTA_INFOS}"] << {"quotaInfos": [quota_info(A100_METRIC, (None, "2"), ("us-east4", "8"))]}

    assert cloud_quotas(google_api)(VertexSettings(project="ml-prod", region="asia-east1"), "NVIDIA_TESLA_A100") == 2


def test_unlimited_or_missing_quota_is_an_error_not_a_guess(google_api: kmock.RawHandler) -> None:
    google_api[f"get {QUOTA_INFOS}"] << {"quotaInfos": [quota_info(A100_METRIC, (None, "-1"))]}
    settings = VertexSettings(project="ml-prod")

    with pytest.raises(BackendError, match=r"unlimited; bound the pool with settings.gpu_quota"):
        cloud_quotas(google_api)(settings, "NVIDIA_TESLA_A100")
    with pytest.raises(BackendError, match=r"shows no quota .*custom_model_training_nvidia_l4_gpus"):
        cloud_quotas(google_api)(settings, "NVIDIA_L4")
    with pytest.raises(BackendError, match=r"needs settings.project"):
        cloud_quotas(google_api)(VertexSettings(), "NVIDIA_TESLA_A100")


def test_spot_pools_count_the_preemptible_quota_and_unknown_accelerators_need_a_metric() -> None:
    spot = VertexSettings(spot=True)
    assert quota_metric("NVIDIA_H100_80GB", spot) == (
        "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_h100_gpus"
    )
    with pytest.raises(BackendError, match=r"set settings.quota_metric"):
        quota_metric("NVIDIA_B200", VertexSettings())
    named = VertexSettings(quota_metric="custom_model_training_nvidia_b200_gpus")
    assert quota_metric("NVIDIA_B200", named) == "aiplatform.googleapis.com/custom_model_training_nvidia_b200_gpus"

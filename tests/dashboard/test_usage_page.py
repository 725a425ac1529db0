"""The Usage page in a real headless Chromium against a real server: two teams' real leases (one of them
preempted after a checkpoint report), the chart's bars and the chargeback table checked against
``GET /v1/usage``, and a price typed on the page changing the costs and the CSV download."""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Page, expect

from tests.dashboard.helpers import Api

pytestmark = pytest.mark.browser

SignIn = Callable[[str], Page]
PER_GPU_SECOND = 3600.0
"""A price per GPU-hour that makes a cost equal to the GPU-seconds (the leases here last seconds)."""


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def expected_bars(report: dict[str, Any], subjects: set[str]) -> dict[tuple[str, str, datetime], float]:
    """``(subject, kind, bucket) -> GPU-seconds`` as the API reports them, for the page's bars (the
    preempted chart splits ``preempted`` into ``lost`` and the part a checkpoint kept)."""
    out = {}
    for row in report["rows"]:
        if row["subject"] not in subjects:
            continue
        kinds = {k: row[k].get("gpu", 0.0) for k in ("in_share", "borrowed", "lost")}
        kinds["checkpointed"] = round(row["preempted"].get("gpu", 0.0) - kinds["lost"], 3)
        for kind, seconds in kinds.items():
            if seconds > 0:
                out[(row["subject"], kind, _at(row["bucket"]))] = seconds
    return out


def test_usage_page_matches_the_api_and_prices_change_the_csv(sign_in: SignIn, api: Api) -> None:
    world = api.world(whole_gpus=4, reserved_gpu=1)
    other, other_token = api.add_subject(world, "nlp", reserved={"gpu": 1}, priority=10)
    borrowing = api.grant(world.token, resources={"gpu": 2}, preemptible=True)  # 1 in share, 1 borrowed
    preempted = api.grant(other_token, resources={"gpu": 1}, preemptible=True)
    time.sleep(0.6)
    api.ok("POST", f"/v1/leases/{preempted['id']}/checkpoint", token=other_token)
    time.sleep(0.4)
    api.ok("POST", f"/v1/leases/{preempted['id']}/preempt", json={"grace_s": 30, "message": "making room"})
    api.ok("POST", f"/v1/leases/{preempted['id']}/release", token=other_token)
    api.ok("POST", f"/v1/leases/{borrowing['id']}/release", token=world.token)
    assert api.ok("GET", f"/v1/leases/{preempted['id']}")["state"] == "preempted"

    page = sign_in(api.token("viewer"))
    page.goto("/usage?days=1&bucket=hour")
    main = page.locator("main")
    window = {"since": main.get_attribute("data-since"), "until": main.get_attribute("data-until")}
    subjects = {world.subject, other}
    by_hour = api.ok("GET", "/v1/usage", params=window | {"by": "subject,hour"})
    by_pool = api.ok("GET", "/v1/usage", params=window | {"by": "subject,pool"})

    # the chart: one bar segment per team, kind and hour, each the API's figure
    bars = page.locator("#teams-chart rect[data-subject], #preempted-chart rect[data-subject]")
    drawn = {
        (b["subject"], b["kind"], _at(b["bucket"])): float(b["seconds"])
        for b in bars.evaluate_all(
            "els => els.map(e => ({subject: e.dataset.subject, kind: e.dataset.kind,"
            " bucket: e.dataset.bucket, seconds: e.dataset.gpuSeconds}))"
        )
        if b["subject"] in subjects
    }
    expected = expected_bars(by_hour, subjects)
    assert drawn.keys() == expected.keys()
    for bar, seconds in drawn.items():
        assert seconds == pytest.approx(expected[bar], abs=0.0011), bar  # the API rounds each kind to 1 ms
    assert {kind for _, kind, _ in drawn} == {"in_share", "borrowed", "lost", "checkpointed"}
    assert page.locator(f'#preempted-chart rect[data-subject="{world.subject}"]').count() == 0

    # the chargeback table: GPU-hours per team and pool, as the API says
    totals = {row["subject"]: row for row in by_pool["rows"] if row["subject"] in subjects}
    assert set(totals) == subjects
    for subject, row in totals.items():
        tr = page.locator(f'table.chargeback tr[data-subject="{subject}"][data-pool="{world.pool}"]')
        assert float(tr.get_attribute("data-gpu-hours") or "nan") * 3600 == pytest.approx(row["total"]["gpu"], abs=2e-3)
        expect(tr.locator("td.cost")).to_have_text("—")

    # a price changes the costs on the page and in the CSV the link downloads
    page.get_by_label(f"Price per GPU-hour in pool {world.pool}").fill(str(PER_GPU_SECOND))
    link = page.locator("#chargeback-csv")
    expect(link).to_have_attribute("href", re.compile(f"price={world.pool}%3D{PER_GPU_SECOND:g}"))
    query = parse_qs(urlsplit(link.get_attribute("href") or "").query)
    assert query["price"] == [f"{world.pool}={PER_GPU_SECOND:g}"]
    assert [_at(query["since"][0]), _at(query["until"][0])] == [_at(window["since"] or ""), _at(window["until"] or "")]
    shown = {}
    for subject, row in totals.items():
        cell = page.locator(f'table.chargeback tr[data-subject="{subject}"] td.cost')
        expect(cell).not_to_have_text("—")
        shown[subject] = float(cell.inner_text())
        assert shown[subject] == pytest.approx(row["total"]["gpu"], abs=0.011)
    assert f"price={world.pool}%3D" in page.url, "the page's address keeps the price"
    download = page.request.get(link.get_attribute("href") or "")
    assert download.ok and download.headers["content-type"].startswith("text/csv")
    lines = {r["subject"]: r for r in csv.DictReader(io.StringIO(download.text())) if r["subject"] in subjects}
    assert {s: float(r["cost"]) for s, r in lines.items()} == shown
    preempted_hours = totals[other]["preempted"]["gpu"] / 3600
    assert float(lines[other]["gpu_hours_preempted"]) == pytest.approx(preempted_hours, abs=1e-4)

"""The dashboard in a real headless Chromium against a real server: what a platform team and a data
scientist see, and that it changes live — without a reload — when the service's state does."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Page, expect

from tests.dashboard.helpers import Api

pytestmark = pytest.mark.browser

LIVE_WITHIN_MS = 2_000
"""The issue asks for updates within a second; the budget doubles that for a loaded CI machine."""

SignIn = Callable[[str], Page]


def mark_document(page: Page) -> None:
    """Tag the loaded document, so a test can tell that a change arrived without a reload."""
    page.evaluate("window.__respoolsMark = 'still-here'")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__respoolsMark") == "still-here", "the page reloaded"


def test_unauthenticated_visitor_sees_the_login_prompt(page: Page, api: Api) -> None:
    api.world()  # there is something to hide
    page.goto("/")
    expect(page.get_by_label("Access token")).to_be_visible()
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    expect(page.locator("#sec-pools")).to_have_count(0)
    assert page.request.get("/ui/sections").status == 401
    assert page.request.get("/ui/stream").status == 401

    page.get_by_label("Access token").fill("rp_not_a_real_token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not known")
    expect(page.locator("#sec-pools")).to_have_count(0)
    assert "rp_" not in page.url


def test_signed_in_page_renders_pools_and_the_gpu_map(sign_in: SignIn, api: Api) -> None:
    world = api.world(whole_gpus=2, mig_profiles=["3g.40gb", "3g.40gb"], reserved_gpu=2)
    labels = {"pipeline": "train-llm", "run": "run-7", "step": "finetune"}
    whole = api.grant(world.token, resources={"gpu": 1}, preemptible=True, labels=labels)
    fraction = api.grant(world.token, resources={"gpu": 0.5}, preemptible=True)
    mig = api.grant(world.token, resources={"mig.3g.40gb": 1}, preemptible=True)

    page = sign_in(api.token("viewer"))
    pool = page.locator(f'article.pool[data-pool="{world.pool}"]')
    expect(pool.get_by_role("heading", name=world.pool)).to_be_visible()
    gpu_row = pool.locator('table.capacity tr[data-key="gpu"]')
    expect(gpu_row.locator("td").nth(0)).to_have_text("2")  # capacity: two whole GPUs
    expect(gpu_row.locator("td").nth(1)).to_have_text("1.5")  # in share
    expect(pool.locator('table.capacity tr[data-key="mig.3g.40gb"] td').nth(0)).to_have_text("2")
    expect(pool.locator(f'table.teams tr[data-subject="{world.subject}"]')).to_be_visible()

    # the GPU map: the whole GPU with its holder, the half GPU, and the MIG instance
    whole_gpu = whole["placement"]["items"][0]["gpu_uuid"]
    tile = pool.locator(f'li.gpu[data-gpu="{whole_gpu}"]')
    expect(tile.locator(f'[data-lease="{whole["id"]}"]')).to_contain_text(
        f"{world.subject} · train-llm / run-7 / finetune"
    )
    expect(tile.locator(".share")).to_have_text("whole GPU")
    expect(tile.locator(".gpu-summary")).to_have_count(0)
    half_gpu = fraction["placement"]["items"][0]["gpu_uuid"]
    expect(pool.locator(f'li.gpu[data-gpu="{half_gpu}"] [data-lease="{fraction["id"]}"] .share')).to_contain_text("0.5")
    mig_slot = pool.locator(f'li.gpu.mig .slot[data-lease="{mig["id"]}"]')
    expect(mig_slot).to_contain_text("3g.40gb")
    expect(mig_slot).to_contain_text(world.subject)
    expect(pool.locator("li.gpu.mig .slot.free")).to_have_count(1)

    # the leases table: labels, placement, age
    row = page.locator(f'#sec-leases tr[data-lease="{whole["id"]}"]')
    expect(row).to_contain_text("train-llm / run-7 / finetune")
    expect(row).to_contain_text(world.pool)
    expect(row.locator("td.placement")).to_contain_text("GPU")
    expect(row.locator("time.age")).to_have_text(re.compile(r"^\d+ s$|^\d+ m \d\d s$"))


def test_a_lease_granted_through_the_api_appears_live(sign_in: SignIn, api: Api) -> None:
    world = api.world()
    page = sign_in(api.token("viewer"))
    pool = page.locator(f'article.pool[data-pool="{world.pool}"]')
    expect(pool.locator('table.capacity tr[data-key="gpu"] td').nth(1)).to_have_text("0")
    mark_document(page)

    lease = api.grant(world.token, resources={"gpu": 1}, preemptible=True, labels={"step": "live-step"})
    granted_at = time.monotonic()
    row = page.locator(f'#sec-leases tr[data-lease="{lease["id"]}"]')
    expect(row).to_be_visible(timeout=LIVE_WITHIN_MS)
    print(f"lease row visible {time.monotonic() - granted_at:.2f} s after the grant")
    expect(row).to_contain_text("live-step")
    expect(pool.locator('table.capacity tr[data-key="gpu"] td').nth(1)).to_have_text("1")
    gpu = lease["placement"]["items"][0]["gpu_uuid"]
    expect(pool.locator(f'li.gpu[data-gpu="{gpu}"] [data-lease="{lease["id"]}"]')).to_be_visible()
    expect(page.locator(f'#sec-history tr[data-kind="granted"][data-lease="{lease["id"]}"]')).to_be_visible()

    api.ok("POST", f"/v1/leases/{lease['id']}/release", token=world.token)
    expect(row).to_have_count(0, timeout=LIVE_WITHIN_MS)
    expect(page.locator(f'#sec-history tr[data-kind="released"][data-lease="{lease["id"]}"]')).to_be_visible()
    assert_not_reloaded(page)


def test_a_preemption_shows_its_countdown_then_the_history_entry(sign_in: SignIn, api: Api) -> None:
    world = api.world()
    lease = api.grant(world.token, resources={"gpu": 1}, preemptible=True)
    page = sign_in(api.token("viewer"))
    row = page.locator(f'#sec-leases tr[data-lease="{lease["id"]}"]')
    expect(row).to_have_attribute("data-state", "granted")
    mark_document(page)

    api.ok("POST", f"/v1/leases/{lease['id']}/preempt", json={"grace_s": 5, "message": "making room"})
    expect(row).to_have_attribute("data-state", "preempting", timeout=LIVE_WITHIN_MS)
    countdown = row.locator(".countdown")
    expect(countdown).to_have_text(re.compile(r"^[1-5] s left$"))
    first = int(countdown.inner_text().split()[0])
    page.wait_for_timeout(1_500)
    second = int(countdown.inner_text().split()[0])
    assert second < first, f"the countdown did not tick: {first} then {second}"
    expect(row.locator(".reason")).to_have_text("admin")
    expect(page.locator(f'#sec-history tr[data-kind="preempting"][data-lease="{lease["id"]}"]')).to_be_visible()

    # past the deadline the lease is overdue and keeps its GPUs (DESIGN §2.8): the row says so
    expect(row.locator(".badge.overdue")).to_have_text(re.compile(r"^overdue "), timeout=10_000)
    expect(page.locator(f'#sec-history tr[data-kind="overdue"][data-lease="{lease["id"]}"]')).to_be_visible()
    # once its holder lets go, it leaves the table and its end enters the history
    api.ok("POST", f"/v1/leases/{lease['id']}/release", token=world.token)
    preempted = page.locator(f'#sec-history tr[data-kind="preempted"][data-lease="{lease["id"]}"]')
    expect(preempted).to_be_visible(timeout=10_000)
    expect(preempted.locator(".reason")).to_have_text("admin")
    expect(row).to_have_count(0)
    assert_not_reloaded(page)


def test_the_queue_shows_positions_and_why_requests_wait(sign_in: SignIn, api: Api) -> None:
    world = api.world(whole_gpus=1, reserved_gpu=1)
    api.grant(world.token, resources={"gpu": 1}, preemptible=True)
    page = sign_in(api.token("viewer"))
    mark_document(page)

    first = api.submit(world.token, wait=0, resources={"gpu": 1}, preemptible=True, labels={"step": "waits-1"})
    second = api.submit(world.token, wait=0, resources={"gpu": 1}, preemptible=True, labels={"step": "waits-2"})
    first_row = page.locator(f'#sec-queue tr[data-request="{first["id"]}"]')
    second_row = page.locator(f'#sec-queue tr[data-request="{second["id"]}"]')
    expect(first_row.locator("td.position")).to_have_text("1", timeout=5_000)
    expect(second_row.locator("td.position")).to_have_text("2", timeout=5_000)
    expect(first_row).to_contain_text(world.pool)
    expect(first_row.locator(".wait-reason")).not_to_have_text("not yet scheduled")
    assert first_row.get_attribute("data-wait-reason")
    expect(first_row).to_contain_text("waits-1")
    assert_not_reloaded(page)


def test_a_viewer_sees_no_admin_buttons(sign_in: SignIn, api: Api) -> None:
    world = api.world()
    lease = api.grant(world.token, resources={"gpu": 1}, preemptible=True)
    page = sign_in(api.token("viewer"))
    expect(page.locator(f'#sec-leases tr[data-lease="{lease["id"]}"]')).to_be_visible()
    expect(page.locator("button.action")).to_have_count(0)
    expect(page.locator(".badge.role-viewer")).to_be_visible()
    assert page.request.post(f"/ui/pools/{world.pool}/drain").status == 403


def test_an_admin_drains_a_pool_and_preempts_a_lease_from_the_page(sign_in: SignIn, api: Api) -> None:
    world = api.world()
    lease = api.grant(world.token, resources={"gpu": 1}, preemptible=True)
    page = sign_in(api.token("admin"))
    page.on("dialog", lambda dialog: dialog.accept())
    mark_document(page)

    pool = page.locator(f'article.pool[data-pool="{world.pool}"]')
    pool.get_by_role("button", name=f"Drain pool {world.pool}").click()
    expect(pool.locator('[data-testid="draining"]')).to_be_visible(timeout=LIVE_WITHIN_MS)
    assert api.ok("GET", f"/v1/pools/{world.pool}")["draining"] is True
    expect(pool.get_by_role("button", name=f"Resume pool {world.pool}")).to_be_visible()

    page.get_by_role("button", name=f"Preempt lease {lease['id']} of {world.subject}").click()
    row = page.locator(f'#sec-leases tr[data-lease="{lease["id"]}"]')
    expect(row).to_have_attribute("data-state", "preempting", timeout=LIVE_WITHIN_MS)
    expect(page.locator("#flash")).to_contain_text("preemption notice")
    assert api.ok("GET", f"/v1/leases/{lease['id']}")["state"] == "preempting"
    assert_not_reloaded(page)


def test_utilization_charts_and_the_reservations_timeline(sign_in: SignIn, api: Api) -> None:
    world = api.world(whole_gpus=4, reserved_gpu=2)
    start = datetime.now(UTC) + timedelta(hours=2)
    reservation = api.ok(
        "POST",
        "/v1/reservations",
        json={
            "subject": world.subject,
            "pool": world.pool,
            "resources": {"gpu": 1},
            "start": start.isoformat(),
            "end": (start + timedelta(hours=3)).isoformat(),
            "note": "quarterly eval",
        },
    )
    api.grant(world.token, resources={"gpu": 3}, preemptible=True)  # 2 in share, 1 borrowed
    page = sign_in(api.token("viewer"))

    charts = page.locator(f'#sec-usage .pool-charts[data-pool="{world.pool}"]')
    expect(charts.locator(".main-chart svg path.area-borrowed")).to_have_count(1)
    expect(charts.locator(".main-chart svg path.line-capacity")).to_have_count(1)
    team = charts.locator(f'.team-chart[data-subject="{world.subject}"] svg')
    expect(team.locator("path.line-reserved")).to_have_count(1)
    expect(team.locator("path.line-limit")).to_have_count(1)
    assert "1 borrowed" in (charts.locator(".main-chart svg").get_attribute("aria-label") or "")

    bar = page.locator(f'#sec-reservations svg.timeline g[data-reservation="{reservation["id"]}"]')
    expect(bar).to_have_count(1)
    row = page.locator(f'#sec-reservations tr[data-reservation="{reservation["id"]}"]')
    expect(row).to_contain_text("upcoming")
    expect(row).to_contain_text("quarterly eval")

"""Take the dashboard screenshots in ``docs/img/`` from a real server and a real browser.

    .venv/bin/python -m tests.dashboard.screenshots [--out docs/img]

Starts ``respools server`` on SQLite in a temporary directory, plays about two minutes of a platform's
life through the API (teams taking their reserved share, a sandbox borrowing idle GPUs and fractions,
MIG slices, production reclaiming capacity, a lease expiring, a request rejected, requests queueing,
reservations), then photographs the page in headless Chromium. Not a test (pytest does not collect
it); run it again when the dashboard's look changes."""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright

from tests.dashboard.helpers import CHROMIUM, CHROMIUM_ARGS, Api, a100, a100_mig
from tests.server.servers import start_server, wait_ready

ADMIN = "rp_screenshot_admin"
POOL = "a100-onprem"
CLOUD = "h100-cloud"
STEP_S = 12.0


def define(api: Api) -> dict[str, str]:
    """Pools, teams, policies, reservations; returns each team's token."""
    dgx1 = [a100(f"GPU-dgx1-{i}", i) for i in range(6)] + [
        a100_mig("GPU-dgx1-6", 6, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]),
        a100_mig("GPU-dgx1-7", 7, ["4g.40gb", "3g.40gb"]),
    ]
    dgx2 = [a100(f"GPU-dgx2-{i}", i) for i in range(4)]
    api.ok(
        "PUT",
        f"/v1/pools/{POOL}",
        json={
            "name": POOL,
            "inventory": [{"name": "dgx-01", "gpus": dgx1}, {"name": "dgx-02", "gpus": dgx2}],
            "preemption_grace_s": 150,
        },
    )
    api.ok(
        "PUT",
        f"/v1/pools/{CLOUD}",
        json={"name": CLOUD, "capacity": {"gpu": 16, "mcpu": 256000}, "gpu_class": "h100-80gb", "init_timeout_s": 8},
    )
    policies: list[dict[str, Any]] = [
        {"subject": "research", "pool": POOL, "reserved": {"gpu": 4}, "limit": {"gpu": 8}, "priority": 10, "weight": 2},
        {
            "subject": "prod-inference",
            "pool": POOL,
            "reserved": {"gpu": 4, "mig.3g.40gb": 2, "mig.1g.10gb": 2},
            "priority": 100,
        },
        {"subject": "sandbox", "pool": POOL, "limit": {"gpu": 4}, "priority": 1},
        {"subject": "research", "pool": CLOUD, "reserved": {"gpu": 4}, "priority": 10},
        {"subject": "sandbox", "pool": CLOUD, "reserved": {"gpu": 2}, "limit": {"gpu": 8}, "priority": 1},
    ]
    tokens = {}
    for team in ("research", "prod-inference", "sandbox"):
        api.ok("PUT", f"/v1/subjects/{team}", json={"name": team})
        tokens[team] = api.token("subject", team)
    for policy in policies:
        api.ok("POST", "/v1/policies", json=policy)
    now = datetime.now(UTC)
    tomorrow = (now + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    reservations = [
        ("prod-inference", {"gpu": 1}, now - timedelta(minutes=30), now + timedelta(hours=5), "launch week traffic"),
        ("research", {"gpu": 2}, tomorrow, tomorrow + timedelta(hours=4), "quarterly eval"),
        ("sandbox", {"gpu": 1}, now + timedelta(hours=6), now + timedelta(hours=8), "workshop"),
    ]
    for subject, resources, start, end, note in reservations:
        api.ok(
            "POST",
            "/v1/reservations",
            json={
                "subject": subject,
                "pool": POOL,
                "resources": resources,
                "start": start.isoformat(),
                "end": end.isoformat(),
                "note": note,
            },
        )
    return tokens


class Holders:
    """Heartbeats for the leases the story keeps alive (the pools' TTL would expire them otherwise)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.leases: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def hold(self, token: str, wait: float = 10.0, **spec: Any) -> dict[str, Any]:
        request = self.api.submit(token, wait=wait, **spec)
        if request["state"] == "granted":
            self.leases[request["lease_id"]] = token
            self.api.ok("POST", f"/v1/leases/{request['lease_id']}/heartbeat", token=token)
        return request

    def release(self, request: dict[str, Any]) -> None:
        token = self.leases.pop(request["lease_id"])
        self.api.ok("POST", f"/v1/leases/{request['lease_id']}/release", token=token)

    def _run(self) -> None:
        while not self._stop.wait(10):
            for lease_id, token in list(self.leases.items()):
                response = self.api.client.post(
                    f"/v1/leases/{lease_id}/heartbeat", headers={"Authorization": f"Bearer {token}"}
                )
                if response.status_code == 409:
                    self.leases.pop(lease_id, None)

    def stop(self) -> None:
        self._stop.set()


def play(api: Api, tokens: dict[str, str]) -> Holders:
    research, prod, sandbox = tokens["research"], tokens["prod-inference"], tokens["sandbox"]
    holders = Holders(api)
    run = "r-2024-11-18"
    shards = [
        holders.hold(
            research,
            resources={"gpu": 1},
            preemptible=True,
            pools=[POOL],
            labels={"pipeline": "llm-pretrain", "run": run, "step": f"train-shard-{i}"},
        )
        for i in range(3)
    ]
    holders.hold(research, resources={"gpu": 2}, pools=[CLOUD], labels={"pipeline": "llm-pretrain", "step": "eval"})
    time.sleep(STEP_S)
    holders.hold(
        sandbox,
        resources={"gpu": 1},
        preemptible=True,
        max_retries=2,
        pools=[POOL],
        labels={"pipeline": "notebook", "user": "ana"},
    )
    for user in ("li", "sam"):
        holders.hold(
            sandbox,
            resources={"gpu": 0.5, "gpu_memory_mb": 40000},
            preemptible=True,
            pools=[POOL],
            labels={"pipeline": "notebook", "user": user},
        )
    api.submit(sandbox, wait=3, resources={"gpu": 1}, pools=[CLOUD], labels={"pipeline": "smoke-test"})  # expires
    time.sleep(STEP_S)
    for i in range(3, 6):
        holders.hold(
            research,
            resources={"gpu": 1},
            preemptible=True,
            pools=[POOL],
            labels={"pipeline": "llm-pretrain", "run": run, "step": f"train-shard-{i}"},
        )
    time.sleep(STEP_S)
    holders.hold(prod, resources={"gpu": 2}, pools=[POOL], labels={"pipeline": "serve", "step": "llama-70b"})
    for profile in ("3g.40gb", "1g.10gb", "1g.10gb"):
        holders.hold(prod, resources={f"mig.{profile}": 1}, pools=[POOL], labels={"pipeline": "serve", "step": "embed"})
    holders.hold(sandbox, resources={"mig.4g.40gb": 1}, preemptible=True, pools=[POOL], labels={"user": "kim"})
    time.sleep(STEP_S)
    holders.release(shards[0])
    api.submit(sandbox, wait=3, resources={"gpu": 1}, pools=[POOL], labels={"pipeline": "notebook"})
    api.submit(research, wait=3, resources={"gpu": 12}, pools=[POOL], labels={"pipeline": "oops"})  # rejected
    time.sleep(STEP_S)
    # production reclaims: sandbox's borrowed GPU gets notice (150 s grace), then research queues
    holders.hold(prod, wait=3, resources={"gpu": 2}, preemptible=True, pools=[POOL], labels={"pipeline": "serve"})
    for i in range(2):
        api.submit(
            research,
            wait=0,
            resources={"gpu": 2},
            preemptible=True,
            pools=[POOL],
            labels={"pipeline": "llm-pretrain", "run": run, "step": f"ablation-{i}"},
        )
    api.submit(sandbox, wait=0, resources={"gpu": 1}, preemptible=True, pools=[POOL], labels={"user": "ana"})
    time.sleep(4)
    return holders


def release_preempted(holders: Holders) -> None:
    """The holder of the lease under notice gives it back: the preemption completes, the request requeues."""
    for lease_id, token in list(holders.leases.items()):
        lease = holders.api.ok("GET", f"/v1/leases/{lease_id}", token=token)
        if lease["state"] == "preempting":
            holders.api.ok("POST", f"/v1/leases/{lease_id}/release", token=token)


def shoot(page: Page, out: Path, then: Callable[[], None]) -> None:
    """Photograph the page; ``then`` runs between the countdown shot and the history shots."""
    page.goto("/")
    page.locator("#live-status.live").wait_for()
    page.wait_for_timeout(1500)
    page.screenshot(path=out / "dashboard-overview.png")
    page.add_style_tag(content=".topbar { position: static; }")  # keep the sticky bar off element shots
    page.locator(f'article.pool[data-pool="{POOL}"] .gpu-map').screenshot(path=out / "pool-gpu-map.png")
    page.locator("section[aria-labelledby=leases]").screenshot(path=out / "preemption-countdown.png")
    then()
    page.locator('#sec-history tr[data-kind="requeued"]').first.wait_for()
    page.wait_for_timeout(1500)
    page.locator("section[aria-labelledby=queue]").screenshot(path=out / "queue.png")
    page.locator("section[aria-labelledby=usage]").screenshot(path=out / "utilization.png")
    page.locator("section[aria-labelledby=history]").screenshot(path=out / "history.png")
    page.locator("section[aria-labelledby=reservations]").screenshot(path=out / "reservations.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="respools-shots-") as tmp:
        server = start_server(
            f"sqlite:///{Path(tmp) / 'respools.db'}",
            ADMIN,
            Path(tmp),
            RESPOOLS_LOG_JSON="false",
            RESPOOLS_DASHBOARD_HISTORY_WINDOW_S="600",
        )
        try:
            wait_ready(server)
            api = Api(server.url, ADMIN)
            holders = play(api, define(api))
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                context = browser.new_context(
                    base_url=server.url,
                    viewport={"width": 1440, "height": 900},
                    device_scale_factor=1,
                    bypass_csp=True,  # only for the style tag that unsticks the top bar
                )
                page = context.new_page()
                page.set_viewport_size({"width": 900, "height": 560})
                page.goto("/")
                page.screenshot(path=args.out / "login.png")
                page.set_viewport_size({"width": 1440, "height": 900})
                page.get_by_label("Access token").fill(ADMIN)
                page.get_by_role("button", name="Sign in").click()
                shoot(page, args.out, lambda: release_preempted(holders))
                holders.stop()
                browser.close()
        finally:
            server.stop()
    print(f"screenshots in {args.out}/")


if __name__ == "__main__":
    main()

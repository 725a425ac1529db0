"""Fixtures for the dashboard tests: a real ``respools server`` process (SQLite in a temporary
directory, a known admin token) and Debian's Chromium driven by Playwright.

One server serves the whole session; each test builds its own pool and subject (see
:meth:`Api.world`) and looks only at those."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.dashboard.helpers import CHROMIUM, CHROMIUM_ARGS, Api
from tests.server.servers import ServerProcess, start_server, wait_ready

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ADMIN_TOKEN = "rp_dashboard_test_admin"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:starlette.testclient")
    config.addinivalue_line("filterwarnings", "ignore:Using `httpx` with `starlette.testclient`")


@pytest.fixture(scope="session")
def server() -> Iterator[ServerProcess]:
    with tempfile.TemporaryDirectory(prefix="respools-dashboard-") as tmp:
        process = start_server(
            f"sqlite:///{Path(tmp) / 'respools.db'}",
            ADMIN_TOKEN,
            Path(tmp),
            RESPOOLS_LOG_JSON="false",
            RESPOOLS_DASHBOARD_QUEUE_POLL_S="0.3",
        )
        try:
            wait_ready(process)
            yield process
        finally:
            process.stop()


@pytest.fixture(scope="session")
def api(server: ServerProcess) -> Iterator[Api]:
    client = Api(server.url, ADMIN_TOKEN)
    yield client
    client.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium package (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, server: ServerProcess) -> Iterator[Page]:
    """A fresh browser context (no cookies) per test."""
    context = browser.new_context(base_url=server.url, viewport={"width": 1440, "height": 1000})
    context.set_default_timeout(10_000)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def sign_in(page: Page) -> Callable[[str], Page]:
    """Open the dashboard and sign in with ``token`` through the login prompt."""

    def run(token: str) -> Page:
        page.goto("/")
        page.get_by_label("Access token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        page.locator("#live-status.live").wait_for()
        return page

    return run

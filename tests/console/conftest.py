"""The console driven in a real browser: Debian's chromium, headless, through Playwright.

The API is served for real on loopback (aiohttp's test server: the app ``emq api`` serves, with
traffic history and the fleet view) over this test's real Redis and ZooKeeper; workers are real
``emq worker`` processes delivering to a real HTTP sink (tests/worker/conftest.py). The browser
is the one ``deploy/install-deps.sh`` installs (``apt-get install chromium``); Playwright never
downloads one.

Screenshots go to ``$EMQ_CONSOLE_SCREENSHOTS`` when set (``make screenshots`` points it at
``docs/screenshots``), else to the test's temporary directory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from playwright.async_api import Browser, Page, async_playwright

from emq.api import ApiSettings, make_app
from emq.compose import (
    open_config,
    open_endpoint_board,
    open_fleet_view,
    open_history,
    open_jobs,
    open_plans,
    open_queues,
    open_replays,
    open_subscriptions,
)
from emq.core.settings import Settings
from tests.worker.conftest import sink, worker_process

__all__ = ["sink", "worker_process"]

ADMIN_TOKEN = "test-admin-token"  # tests/conftest.py's settings
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# Debian's /usr/bin/chromium is a wrapper script; the browser itself is here.
CHROMIUM = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser")


def chromium_path() -> str:
    for path in CHROMIUM:
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("chromium is not installed: run deploy/install-deps.sh", pytrace=False)
    return found


@dataclass
class Console:
    """The API under test, its base URL and a helper to set tenants and topics up through it."""

    client: TestClient[Any, Any]
    base: str

    @property
    def url(self) -> str:
        return f"{self.base}/ui/"

    async def tenant(self, name: str) -> str:
        """Create a tenant; returns its token."""
        r = await self.client.post("/v1/tenants", json={"tenant": name}, headers=ADMIN)
        assert r.status == 201, await r.text()
        return str((await r.json())["token"])

    async def topic(self, tenant: str, topic: str, qps: int, **extra: Any) -> None:
        r = await self.client.post(
            f"/v1/tenants/{tenant}/topics",
            json={"topic": topic, "qps": qps, **extra},
            headers=ADMIN,
        )
        assert r.status == 201, await r.text()

    async def patch(self, tenant: str, topic: str, **changes: Any) -> None:
        r = await self.client.patch(
            f"/v1/tenants/{tenant}/topics/{topic}", json=changes, headers=ADMIN
        )
        assert r.status == 200, await r.text()

    async def enqueue(self, tenant: str, topic: str, jobs: list[dict[str, Any]]) -> list[str]:
        ids: list[str] = []
        for i in range(0, len(jobs), 1000):  # the API's batch limit
            r = await self.client.post(
                f"/v1/tenants/{tenant}/topics/{topic}/jobs",
                json={"jobs": jobs[i : i + 1000]},
                headers=ADMIN,
            )
            assert r.status == 202, await r.text()
            ids += (await r.json())["ids"]
        return ids

    async def get(self, path: str, token: str = ADMIN_TOKEN) -> tuple[int, Any]:
        r = await self.client.get(path, headers={"Authorization": f"Bearer {token}"})
        return r.status, await r.json()


@pytest.fixture
async def console(settings: Settings) -> AsyncIterator[Console]:
    queues = await open_queues(settings)
    config = await open_config(settings)
    history = open_history(settings)
    fleet = open_fleet_view(settings)
    jobs = open_jobs(settings)
    replays = open_replays(settings)
    plans = open_plans(settings)
    board = open_endpoint_board(settings)  # what workers see of endpoints (issue 16)
    subscriptions = open_subscriptions(settings)  # events and subscriptions (issue 28)
    app = make_app(
        settings,
        ApiSettings(history_interval_s=1),
        config,
        queues,
        history,
        fleet,
        jobs,
        replays=replays,
        endpoints=board,
        plan_store=plans,
        subscription_store=subscriptions,
    )
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    yield Console(client, str(client.make_url("")).rstrip("/"))
    await client.close()
    await replays.aclose()
    await subscriptions.aclose()
    await board.aclose()
    await plans.aclose()
    await jobs.aclose()
    await fleet.aclose()
    await history.aclose()
    await config.aclose()
    await queues.aclose()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        b = await p.chromium.launch(
            executable_path=chromium_path(), headless=True, args=["--no-sandbox"]
        )
        yield b
        await b.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 720})
    page = await context.new_page()
    errors: list[str] = []  # uncaught exceptions in the page's script fail the test
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    await context.close()
    assert not errors, errors


@pytest.fixture
def shot(tmp_path: Path) -> Any:
    """``await shot(page, name)``: a PNG of the page (see the module docstring for where)."""
    folder = Path(os.environ.get("EMQ_CONSOLE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)

    async def take(page: Page, name: str) -> Path:
        path = folder / f"{name}.png"
        await page.screenshot(path=str(path), full_page=True)
        return path

    return take


async def sign_in(page: Page, console: Console, token: str) -> None:
    await page.goto(console.url)
    await page.fill("#token", token)
    await page.click("#signin button[type=submit]")
    await page.wait_for_selector("#view-topics:not([hidden])")

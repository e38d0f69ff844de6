"""The console's Schedules view (issue 28), in headless chromium against the real API, Redis and
ZooKeeper with a schedule firer running: create a schedule from the form, watch its ticks fire
(the last tick's job and state, the next five ticks), pause it, resume it, delete it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from playwright.async_api import Page, expect

from emq.api import ApiSettings, make_app
from emq.compose import open_config, open_jobs, open_queues, open_schedules
from emq.core.settings import Settings
from emq.scheduler.firer import Firer
from emq.scheduler.settings import SchedulerSettings
from tests.console.conftest import Console, sign_in


@pytest.fixture
async def console(settings: Settings) -> AsyncIterator[Console]:
    """The API with schedules and job status, and a firer beside it (as in ``emq api``)."""
    queues, config = await open_queues(settings), await open_config(settings)
    jobs, store = open_jobs(settings), open_schedules(settings)
    app = make_app(settings, ApiSettings(), config, queues, jobs=jobs, schedules=store)
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    stop = asyncio.Event()
    firer = asyncio.create_task(
        Firer(store, config, queues, SchedulerSettings(poll_s=0.05, lookahead_s=0)).run(stop)
    )
    yield Console(client, str(client.make_url("")).rstrip("/"))
    stop.set()
    await firer
    await client.close()
    for closing in (store, jobs, config, queues):
        await closing.aclose()


async def test_a_schedule_is_created_fires_and_is_paused_resumed_deleted(
    console: Console, page: Page, shot: Any
) -> None:
    acme = await console.tenant("acme")
    await console.topic("acme", "cron", 10)
    await sign_in(page, console, acme)
    await page.click("#nav button[data-view=schedules]")
    await page.fill("#schedules-form input[name=tenant]", "acme")
    await page.fill("#schedules-form input[name=topic]", "cron")
    await page.click("#schedules-form button[type=submit]")
    form = page.locator("#schedule-create")
    await form.locator("input[name=cron]").fill("61 * * * *")
    await form.locator("input[name=url]").fill("http://127.0.0.1:9/hook")
    await form.locator("button[type=submit]").click()
    await expect(page.locator("#error")).to_contain_text("field cron")
    await form.locator("input[name=id]").fill("beat")
    await form.locator("input[name=cron]").fill("* * * * * *")
    await form.locator("input[name=timezone]").fill("Europe/Paris")
    await form.locator("button[type=submit]").click()
    await expect(page.locator("#schedule-status")).to_contain_text("schedule beat created")
    row = page.locator("#schedules tbody tr[data-id=beat]")
    await expect(row.locator(".schedule-state")).to_have_text("active")
    await expect(row.locator(".schedule-last")).to_contain_text("msg_")  # fired, polled
    await row.locator(".schedule-id").click()
    await expect(page.locator("#schedule-next li")).to_have_count(5)
    await expect(page.locator("#schedule-last")).to_contain_text("queued")
    await shot(page, "console-schedules")
    await row.locator("button.schedule-pause").click()
    await expect(row.locator(".schedule-state")).to_have_text("paused")
    await expect(row.locator(".schedule-next")).to_have_text("-")
    await row.locator("button.schedule-resume").click()
    await expect(row.locator(".schedule-state")).to_have_text("active")
    await row.locator("button.schedule-delete").click()
    await expect(page.locator("#schedules tbody tr")).to_have_count(0)
    status, _ = await console.get("/v1/tenants/acme/topics/cron/schedules/beat", acme)
    assert status == 404

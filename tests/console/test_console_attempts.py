"""The console's attempt timeline, its latest dead and failing jobs and its redeliveries
(docs/concepts/attempts.md), in headless chromium against the real API, Redis and ZooKeeper:
the records are written through the job store as a worker's flush writes them."""

from __future__ import annotations

import time
from typing import Any

import orjson
from playwright.async_api import Page, expect

from emq.compose import open_jobs, open_replays
from emq.core.interfaces import PushResult
from emq.core.jobs import JobRecord
from emq.core.model import GroupRef, Namespace, Priority, TopicRef
from emq.core.settings import Settings
from tests.console.conftest import Console, sign_in
from worker.attempt_log import encode_attempt

OK = "msg_01m8jar65eg000cxcdvgmyh20k"
DEAD = "msg_01m8jar65eg000cxcdvgmyh20m"


async def test_a_job_s_attempts_the_failing_jobs_and_a_redelivery(
    console: Console, page: Page, settings: Settings, shot: Any
) -> None:
    acme = await console.tenant("acme")
    await console.topic("acme", "hooks", 50, keep_delivered_s=600)
    ref = TopicRef(Namespace.ONLINE, "acme", "hooks")
    now = int(time.time() * 1000)
    jobs, replays = open_jobs(settings), open_replays(settings)
    try:
        busy = PushResult(503, 0.02, meta=(b"1", None, b"0", b""))
        fine = PushResult(200, 0.05, meta=(None, b"application/json", b"2", b"ok"))
        attempts = [
            (OK, 1, encode_attempt(1, now - 2000, busy, None)),
            (OK, 2, encode_attempt(2, now - 1000, fine, None)),
            (DEAD, 1, encode_attempt(1, now - 500, None, "cannot connect: Connection refused")),
        ]
        records = [
            (OK, orjson.dumps(JobRecord(OK, "delivered", now - 1000, 2, 200, None, 9).to_dict())),
            (DEAD, orjson.dumps(JobRecord(DEAD, "dead", now - 500, 1, None, "refused").to_dict())),
        ]
        index = [
            (str(ref), OK, "delivered", now - 1000, None, None),
            (str(ref), DEAD, "dead", now - 500, None, None),
        ]
        envelope = {"id": OK, "t": now, "job": {"url": "https://e.x/"}, "a": 2}
        kept = [(GroupRef(ref, 0).queue(Priority.MEDIUM), 600_000, orjson.dumps(envelope))]
        await jobs.record(records, attempts, index, kept)

        await sign_in(page, console, acme)
        await page.click("#nav button[data-view=job]")
        await page.fill("#job-form input[name=tenant]", "acme")
        await page.fill("#job-form input[name=topic]", "hooks")
        await page.fill("#job-form input[name=id]", OK)
        await page.click("#job-form button[type=submit]")
        steps = page.locator("#attempt-timeline li")
        await expect(steps).to_have_count(2)
        await expect(steps.nth(0).locator(".attempt-answer")).to_have_text("HTTP 503")
        await expect(steps.nth(0)).to_contain_text("retry-after: 1")
        await expect(steps.nth(1).locator(".attempt-answer")).to_have_text("HTTP 200")
        await expect(steps.nth(1).locator(".attempt-excerpt")).to_have_text("ok")
        await shot(page, "console-attempts")

        await page.click("#nav button[data-view=dlq]")
        await page.fill("#dlq-form input[name=tenant]", "acme")
        await page.fill("#dlq-form input[name=topic]", "hooks")
        await page.click("#dlq-form button[type=submit]")
        recent = page.locator("#recent-jobs tbody tr")
        await expect(recent).to_have_count(1)
        await expect(recent.locator(".recent-error")).to_have_text("refused")
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now / 1000 - 60))
        await page.fill("#redeliver-since", since)
        await page.fill("#redeliver-rate", "1")
        await page.click("#redeliver")
        await expect(page.locator("#redeliver-status")).to_contain_text("1 jobs at 1/s")
        row = page.locator("#redeliveries tbody tr")
        await expect(row.locator(".redelivery-state")).to_have_text("running")
        await row.locator("button.redelivery-cancel").click()
        await expect(row.locator(".redelivery-state")).to_have_text("cancelled")
        (progress,) = await replays.latest(ref, 1)
        assert progress.replay.source == "delivered" and progress.replay.total == 1
    finally:
        await jobs.aclose()
        await replays.aclose()

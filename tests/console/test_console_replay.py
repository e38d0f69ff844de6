"""The console's DLQ view runs paced replays (issue 16, item 4), in headless chromium against
the real API, Redis and ZooKeeper: start one at a rate, watch its progress bar move as the
letters are put back (here by the test, as a worker's mover would), cancel it."""

from __future__ import annotations

import time
from typing import Any

from playwright.async_api import Page, expect

from emq.compose import open_queues, open_replays
from emq.core.interfaces import DeadLetter
from emq.core.model import Envelope, GroupRef, Job, Namespace, Priority, TopicRef
from emq.core.settings import Settings
from tests.console.conftest import Console, sign_in


async def test_a_paced_replay_is_started_followed_and_cancelled(
    console: Console, page: Page, settings: Settings, shot: Any
) -> None:
    acme = await console.tenant("acme")
    await console.topic("acme", "hooks", 50)
    ref = TopicRef(Namespace.ONLINE, "acme", "hooks")
    now = int(time.time() * 1000)
    queues, store = await open_queues(settings), open_replays(settings)
    try:
        letters = [
            DeadLetter("", Priority.MEDIUM, Envelope(f"j{i}", Job(url="https://e.x/"), now)
                       .encode(), "HTTP 500", 500, 8, now)
            for i in range(10)
        ]  # fmt: skip
        await queues.dead_letter(GroupRef(ref, 0), 0, letters)
        await sign_in(page, console, acme)
        await page.click("#nav button[data-view=dlq]")
        await page.fill("#dlq-form input[name=topic]", "hooks")
        await page.click("#dlq-form button[type=submit]")
        await expect(page.locator("#dlq tbody tr")).to_have_count(10)
        await page.fill("#replay-rate", "2")
        await page.click("#dlq-replay-paced")
        await expect(page.locator("#replay-status")).to_contain_text("10 letters at 2/s")
        row = page.locator("#replays tbody tr")
        await expect(row).to_have_count(1)
        await expect(row.locator(".replay-state")).to_have_text("running")
        (replay,) = await store.latest(ref, 1)
        await store.move(replay.replay, [(0, 4)])  # what a worker's mover does, paced
        await expect(row.locator(".replay-done")).to_have_text("4 of 10")  # polled
        await expect(row.locator("progress")).to_have_attribute("value", "4")
        await shot(page, "console-replay")
        await row.locator("button.replay-cancel").click()
        await expect(row.locator(".replay-state")).to_have_text("cancelled")
        await expect(row.locator("button.replay-cancel")).to_have_count(0)
        assert (await store.get(ref, replay.replay.id)).remaining == 6
    finally:
        await store.aclose()
        await queues.aclose()

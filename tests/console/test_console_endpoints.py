"""The console's endpoints column end to end in headless chromium: a worker disables an
endpoint that keeps failing, the console shows it with the reason, the admin re-enables it and
its held jobs are delivered (real API, Redis, ZooKeeper, worker process and sink)."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Page, expect

from tests.console.conftest import Console, sign_in
from tests.worker.conftest import Sink

ROW = 'tr[data-key="online/acme/hooks"]'


async def test_a_disabled_endpoint_is_shown_and_re_enabled_from_the_console(
    console: Console, page: Page, sink: Sink, worker_process: Any
) -> None:
    await console.tenant("acme")
    retry = {"max_attempts": 50, "base_delay_s": 0.1, "jitter": 0.0}
    policy = {"disable_after": 3, "disable_after_s": 0}
    await console.topic("acme", "hooks", 20, retry=retry, endpoints=policy)
    sink.behaviour["hooks"].status = 500
    ids = await console.enqueue("acme", "hooks", [{"url": sink.url("hooks")} for _ in range(4)])
    worker_process("w1")

    await sign_in(page, console, "test-admin-token")
    line = page.locator(f"{ROW} td.endpoints .endpoint")
    await expect(line).to_contain_text("disabled", timeout=20_000)
    assert (await line.get_attribute("title") or "").startswith("disabled after 3")
    assert not sink.of("hooks")
    sink.behaviour["hooks"].status = 200
    await line.locator("button.enable-endpoint").click()
    await expect(page.locator("#topics-at")).to_contain_text("re-enabled")
    assert await sink.wait_for(lambda: {d.job_id for d in sink.of("hooks")} == set(ids), 15)
    await expect(line).not_to_contain_text("disabled", timeout=10_000)

"""The console's Subscriptions view (issue 28), in headless chromium against the real API, Redis
and ZooKeeper: a tenant loads its topic's subscriptions, creates one (the secret is shown once),
publishes a test event and sees its delivery, disables the subscription, rotates its secret and
deletes it."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Page, expect

from tests.console.conftest import ADMIN_TOKEN, Console, sign_in


async def test_subscriptions_are_managed_from_the_console(
    console: Console, page: Page, shot: Any
) -> None:
    acme = await console.tenant("acme")
    await console.topic("acme", "billing", 50)
    await sign_in(page, console, acme)
    await page.click("#nav button[data-view=subscriptions]")
    await expect(page.locator("#subs-form input[name=tenant]")).to_have_value("acme")
    await page.fill("#subs-form input[name=topic]", "billing")
    await page.click("#subs-form button[type=submit]")
    await expect(page.locator("#subs-count")).to_have_text("0 of at most 1000")
    await page.fill("#sub-form input[name=url]", "https://hooks.example/in")
    await page.fill("#sub-form input[name=types]", "invoice.*, order.paid")
    await page.fill("#sub-form input[name=header]", "X-Team: billing")
    await page.click("#sub-create")
    row = page.locator("#subs tbody tr")
    await expect(row).to_have_count(1)
    await expect(row.locator(".sub-types")).to_have_text("invoice.*, order.paid")
    secret = page.locator("#sub-secret-text")
    await expect(secret).to_contain_text("whsec_")
    first = await secret.text_content()
    await page.fill("#event-form input[name=type]", "invoice.paid")
    await page.fill("#event-form input[name=payload]", '{"invoice": 42}')
    await page.click("#event-publish")
    await expect(page.locator("#event-status")).to_contain_text("1 deliveries")
    await expect(page.locator("#event-deliveries .delivery-state")).to_have_text("queued")
    await shot(page, "console-subscriptions")
    await row.locator("button.sub-toggle").click()
    await expect(row.locator(".sub-enabled")).to_have_text("no")
    await row.locator("button.sub-rotate").click()
    await expect(secret).not_to_have_text(first or "")
    await expect(secret).to_contain_text("whsec_")
    sub_id = await row.get_attribute("data-id")
    status, body = await console.get(f"/v1/tenants/acme/topics/billing/subscriptions/{sub_id}")
    assert status == 200 and body["enabled"] is False and "secret" not in body
    await page.fill("#sub-form input[name=url]", "https://hooks.example/2")
    await page.fill("#sub-form input[name=types]", "bad type")
    await page.click("#sub-create")
    await expect(page.locator("#error")).to_contain_text("event_types[0]")
    await row.locator("button.sub-delete").click()
    await expect(page.locator("#subs tbody tr")).to_have_count(0)
    status, body = await console.get("/v1/tenants/acme/topics/billing/subscriptions", ADMIN_TOKEN)
    assert body["subscriptions"] == []

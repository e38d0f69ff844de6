"""The console's Plan view follows a rollout (``emq plan apply --canary``) in headless
chromium: a progress bar, each topic's step, status, signals and breaches, updated while the
rollout runs, and its end (rolled back, with the reason)."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Page, expect

from tests.console.conftest import ADMIN, Console, sign_in


def topic(name: str, step: int, before: int, after: int) -> dict[str, Any]:
    return {"name": f"online/acme/{name}", "namespace": "online", "tenant": "acme",
            "topic": name, "step": step, "before": {"qps": before, "groups": 1},
            "after": {"qps": after, "groups": 1}}  # fmt: skip


async def patch(console: Console, rollout: str, body: dict[str, Any]) -> None:
    r = await console.client.patch(f"/v1/rollouts/{rollout}", json=body, headers=ADMIN)
    assert r.status == 200, await r.text()


async def test_the_plan_view_shows_a_rollout_progress_and_its_verdicts(
    console: Console, page: Page, shot: Any
) -> None:
    await console.tenant("acme")
    await sign_in(page, console, "test-admin-token")
    await page.click("#nav button[data-view=plan]")
    await expect(page.locator("#plan-empty")).to_be_visible()
    await expect(page.locator("#rollout")).to_be_hidden()  # none yet

    body = {"plan": "plan.json", "canary_pct": 25, "watch_s": 300, "steps": 1,
            "topics": [topic("orders", 0, 10, 20), topic("emails", 1, 50, 80),
                       topic("reports", 1, 200, 20)]}  # fmt: skip
    r = await console.client.post("/v1/rollouts", json=body, headers=ADMIN)
    assert r.status == 201, await r.text()
    rollout = (await r.json())["id"]
    await page.click("#plan-refresh")
    await expect(page.locator("#rollout")).to_have_attribute("data-state", "running")
    await expect(page.locator("#rollout-count")).to_have_text("0 of 3 topics live and healthy")
    rows = page.locator("#rollout-topics tbody tr")
    await expect(rows).to_have_count(3)

    # The canary is judged healthy: the view follows without a click (it polls while running).
    healthy = {"name": "online/acme/orders", "status": "healthy",
               "signals": {"backlog": 3, "failed_share": 0}}  # fmt: skip
    await patch(console, rollout, {"phase": "step 1 of 1", "topics": [healthy]})
    await expect(page.locator("#rollout-progress")).to_have_attribute("value", "1")
    await expect(page.locator("#rollout-count")).to_have_text("1 of 3 topics live and healthy")
    orders = page.locator('#rollout-topics tr[data-topic="online/acme/orders"]')
    await expect(orders.locator(".status")).to_have_text("healthy")
    await expect(page.locator("#rollout-state")).to_contain_text("step 1 of 1")

    # A topic of the step breaches: everything applied is rolled back, with the reason.
    breach = {"signal": "backlog_growth", "figure": 900, "limit": 600, "text": "grew"}
    why = "online/acme/reports: backlog_growth 900 > 600 (grew)"
    await patch(console, rollout, {"topics": [
        {"name": "online/acme/reports", "status": "breached", "breaches": [breach]}]})  # fmt: skip
    await patch(
        console,
        rollout,
        {
            "state": "rolled-back",
            "reason": why,
            "topics": [
                {"name": f"online/acme/{n}", "status": "rolled-back"} for n in ("orders", "reports")
            ],
        },
    )
    await expect(page.locator("#rollout")).to_have_attribute("data-state", "rolled-back")
    await expect(page.locator("#rollout-summary")).to_contain_text(why)
    reports = page.locator('#rollout-topics tr[data-topic="online/acme/reports"]')
    await expect(reports.locator(".status")).to_have_text("rolled-back")
    await expect(reports.locator(".breaches")).to_have_text("backlog_growth 900 > 600")
    await expect(
        page.locator('#rollout-topics tr[data-topic="online/acme/emails"] .status')
    ).to_have_text("pending")
    await shot(page, "console-rollout")

"""The console's capacity-plan view in headless chromium: the latest plan the API keeps, its
report charts (SVG drawn from the plan's series) and the dry-run diff against the live quotas."""

from __future__ import annotations

import math
from typing import Any

from playwright.async_api import Page, expect

from tests.console.conftest import ADMIN, Console, sign_in

DAY = 86_400
START = 1_790_000_000 - 1_790_000_000 % DAY


def planned(topic: str, qps: int, groups: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "namespace": "online",
        "tenant": "acme",
        "topic": topic,
        "qps": qps,
        "groups": groups,
        **extra,
    }


def series(points: int, base: float, peak: float) -> list[float]:
    """A day's cycle: ``base`` at night, ``peak`` at noon."""
    wave = [math.sin(math.pi * i / points) ** 2 for i in range(points)]
    return [round(base + (peak - base) * w, 1) for w in wave]


def document() -> dict[str, Any]:
    t = [START + 300 * i for i in range(288)]
    offered = series(288, 100, 1400)
    return {
        "format": 1,
        "generated_at": "2026-11-24T09:00:00Z",
        "history": {
            "path": "/var/emq/history",
            "rows": 4032,
            "topics": 5,
            "days": 7.0,
            "first_s": START - 6 * DAY,
            "end_s": START + DAY,
        },
        "parameters": {"headroom": 1.5, "max_group_qps": 150, "target_wait_s": 60},
        "fleet": {
            "workers": 4,
            "active_workers": 3,
            "spare_workers": 1,
            "worker_qps": 700,
            "peak_offered_rps": 1400,
            "p99_offered_rps": 1380,
            "demand_qps": 2100,
            "capacity_qps": 2100,
            "peak_utilisation": 0.66,
            "mean_utilisation": 0.31,
            "current_quota_sum": 317,
            "proposed_quota_sum": 2125,
            "current_groups": 4,
            "proposed_groups": 17,
            "redis_shards": 1,
            "redis_ops_per_s": 8400,
        },
        "topics": [
            planned("orders", 2000, 14, rates={"p99": 1320.5}, dry_run={"max_wait_s": 42}),
            planned("emails", 80, rates={"p99": 52}),
            planned("reports", 20, dry_run={"max_wait_s": 600}),
            planned("same", 7),
            planned("retired", 5),
        ],
        "series": {
            "fleet": {
                "t": t,
                "offered_rps": offered,
                "served_rps": [min(v, 1300) for v in offered],
                "replayed_backlog": [max(0.0, v - 1300) * 300 for v in offered],
            },
            "topics": [
                {
                    "namespace": "online",
                    "tenant": "acme",
                    "topic": "orders",
                    "proposed_qps": 2000,
                    "t": t,
                    "rate": series(288, 50, 1320),
                    "quota": [10] * 288,
                    "backlog": [0.0] * 288,
                },
            ],
        },
    }


async def test_the_admin_sees_the_latest_plan_with_charts_and_the_dry_run_diff(
    console: Console, page: Page, shot: Any
) -> None:
    tenant = await console.tenant("acme")
    for topic, qps in (("orders", 10), ("emails", 100), ("reports", 200), ("same", 7)):
        await console.topic("acme", topic, qps)
    await sign_in(page, console, "test-admin-token")
    await page.click("#nav button[data-view=plan]")
    await expect(page.locator("#plan-empty")).to_contain_text("no capacity plan stored yet")

    r = await console.client.post("/v1/plans?source=dry-run", json=document(), headers=ADMIN)
    assert r.status == 201, await r.text()
    await page.click("#plan-refresh")
    await expect(page.locator("#plan-body")).to_be_visible()
    await expect(page.locator("#plan-source")).to_contain_text("emq plan apply --dry-run")
    await expect(page.locator('.card[data-card="workers"] .value')).to_have_text("4")
    # The report's charts: fleet traffic under the capacity lines, the replay's queue, a topic.
    fleet = page.locator("#plan-fleet-chart svg")
    await expect(fleet.locator("polyline.series-offered")).to_have_count(1)
    await expect(fleet.locator("polyline.series-served")).to_have_count(1)
    await expect(fleet.locator("line.level-capacity")).to_have_count(1)
    await expect(page.locator("#plan-backlog-chart polygon")).to_have_count(1)
    await expect(
        page.locator('#plan-topics figure[data-topic="online/acme/orders"]')
    ).to_be_visible()
    points = await fleet.locator("polyline.series-offered").get_attribute("points")
    assert points is not None and len(points.split()) == 288

    # The dry-run diff against the quotas live now.
    diff = page.locator("#plan-diff tbody tr")
    await expect(diff).to_have_count(4)  # "same" is unchanged: counted, not listed
    await expect(page.locator("#plan-counts")).to_contain_text(
        "1 to raise, 1 to lower, 1 lower by more than half"
    )
    reports = page.locator('#plan-diff tr[data-topic="online/acme/reports"]')
    await expect(reports.locator(".action")).to_have_text("needs --force")
    await expect(
        page.locator('#plan-diff tr[data-topic="online/acme/retired"] .action')
    ).to_have_text("unknown topic")
    await expect(diff.first).to_have_attribute("data-topic", "online/acme/reports")
    await shot(page, "console-plan")

    # A quota applied meanwhile: the diff follows the live configuration.
    await console.patch("acme", "orders", qps=2000)
    await page.click("#plan-refresh")
    await expect(diff).to_have_count(3)
    await expect(page.locator("#plan-counts")).to_contain_text("0 to raise")

    # A tenant has no plan view, and the API refuses it the plan.
    status, _ = await console.get("/v1/plans/latest", tenant)
    assert status == 403
    await page.click("#signout")
    await sign_in(page, console, tenant)
    await expect(page.locator("#nav button[data-view=plan]")).to_be_hidden()

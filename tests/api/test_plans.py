"""The latest capacity plan through the API (real Redis and ZooKeeper): stored, bounded, shown
with the dry-run diff against the configuration now."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient, TestServer

from emq.api import ApiSettings, make_app
from emq.compose import open_config, open_plans, open_queues
from emq.core.settings import Settings
from tests.api.conftest import ADMIN


def planned(tenant: str, topic: str, qps: int) -> dict[str, Any]:
    return {"namespace": "online", "tenant": tenant, "topic": topic, "qps": qps, "groups": 1}


def plan(*topics: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "format": 1,
        "generated_at": "2026-11-24T09:00:00Z",
        "history": {"path": "/tmp/h", "rows": 1440, "topics": len(topics), "days": 1.0},
        "parameters": {"headroom": 1.5, "max_group_qps": 150, "target_wait_s": 60},
        "fleet": {"workers": 3, "active_workers": 2, "spare_workers": 1, "worker_qps": 500},
        "topics": list(topics),
        **extra,
    }


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[TestClient[Any, Any]]:
    queues = await open_queues(settings)
    config = await open_config(settings)
    plans = open_plans(settings)
    app = make_app(settings, ApiSettings(plans_kept=2), config, queues, plan_store=plans)
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client
    await client.close()
    await plans.aclose()
    await config.aclose()
    await queues.aclose()


async def setup_topics(client: TestClient[Any, Any]) -> dict[str, str]:
    r = await client.post("/v1/tenants", json={"tenant": "acme"}, headers=ADMIN)
    tenant = {"Authorization": f"Bearer {(await r.json())['token']}"}
    for name, qps in (("up", 10), ("down", 100), ("cut", 100), ("same", 7)):
        r = await client.post(
            "/v1/tenants/acme/topics", json={"topic": name, "qps": qps}, headers=ADMIN
        )
        assert r.status == 201, await r.text()
    return tenant


async def test_the_latest_plan_is_shown_with_the_dry_run_diff_against_the_config_now(
    client: TestClient[Any, Any],
) -> None:
    await setup_topics(client)
    r = await client.get("/v1/plans/latest", headers=ADMIN)
    assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"

    series = {"fleet": {"t": [0, 60, 120], "offered_rps": [1, 5, 2], "served_rps": [1, 4, 2]}}
    document = plan(
        planned("acme", "up", 20) | {"rates": {"p99": 13.3}, "dry_run": {"max_wait_s": 4}},
        planned("acme", "down", 80),
        planned("acme", "cut", 20),
        planned("acme", "same", 7),
        planned("acme", "gone", 5),
        series=series,
        newer_field={"ignored": True},
    )
    r = await client.post("/v1/plans?source=dry-run", json=document, headers=ADMIN)
    assert r.status == 201, await r.text()
    stored = await r.json()
    assert stored["source"] == "dry-run" and stored["topics"] == 5 and stored["kept"] == 1

    shown = await (await client.get("/v1/plans/latest", headers=ADMIN)).json()
    assert shown["id"] == stored["id"] and shown["generated_at"] == "2026-11-24T09:00:00Z"
    assert shown["fleet"]["workers"] == 3 and shown["parameters"]["headroom"] == 1.5
    assert shown["series"]["fleet"]["offered_rps"] == [1, 5, 2]
    diff = shown["diff"]
    assert diff["counts"] == {
        "raise": 1,
        "lower": 1,
        "needs-force": 1,
        "unchanged": 1,
        "unknown": 1,
    }
    rows = {c["topic"]: c for c in diff["changes"]}
    # needs --force first, then by how far the quota moves; unknown topics last
    assert [c["topic"] for c in diff["changes"]] == ["cut", "down", "up", "gone"]
    assert "same" not in rows  # unchanged topics are counted, not listed
    assert rows["up"]["action"] == "raise"
    assert rows["up"]["current_qps"] == 10 and rows["up"]["change_pct"] == 100.0
    assert rows["up"]["p99_rps"] == 13.3 and rows["up"]["max_wait_s"] == 4
    assert rows["down"]["action"] == "lower" and rows["gone"]["current_qps"] is None

    # Applying a quota elsewhere changes the diff: it is computed against the config now.
    r = await client.patch("/v1/tenants/acme/topics/up", json={"qps": 20}, headers=ADMIN)
    assert r.status == 200
    shown = await (await client.get("/v1/plans/latest", headers=ADMIN)).json()
    assert shown["diff"]["counts"]["unchanged"] == 2 and shown["diff"]["counts"]["raise"] == 0


async def test_bad_plans_are_refused_and_change_nothing(client: TestClient[Any, Any]) -> None:
    tenant = await setup_topics(client)
    bad = plan(planned("acme", "up", 20) | {"qps": "20"})
    r = await client.post("/v1/plans", json=bad, headers=ADMIN)
    assert r.status == 422
    assert (await r.json())["error"]["field"] == "topics[0].qps"
    r = await client.post("/v1/plans?source=later", json=plan(), headers=ADMIN)
    assert r.status == 422 and (await r.json())["error"]["field"] == "source"
    r = await client.post("/v1/plans", json=plan(), headers=tenant)
    assert r.status == 403
    r = await client.get("/v1/plans/latest", headers=tenant)
    assert r.status == 403
    r = await client.get("/v1/plans/latest")
    assert r.status == 401
    r = await client.get("/v1/plans/latest", headers=ADMIN)
    assert r.status == 404  # nothing was stored


async def test_only_the_latest_plans_are_kept(
    client: TestClient[Any, Any], redis_client: aioredis.Redis, test_id: str
) -> None:
    ids = []
    for qps in (1, 2, 3):
        r = await client.post("/v1/plans", json=plan(planned("acme", "t", qps)), headers=ADMIN)
        ids.append((await r.json())["id"])
    shown = await (await client.get("/v1/plans/latest", headers=ADMIN)).json()
    assert shown["id"] == ids[-1] and shown["kept"] == 2
    assert await redis_client.llen(f"{test_id}:plans") == 2  # EMQ_API_PLANS_KEPT=2

"""The change log's and the rollouts' metrics (emq.api.change_metrics) on the in-memory
adapters, through the real routes: each is counted once where it is decided, and read back from
the API's registry and its /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from adapters.memory_rollouts import MemoryRolloutStore
from emq.api import ApiSettings, make_app
from emq.api.app import API_KEY
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.settings import Settings
from tests.api.conftest import ADMIN

REF = TopicRef(Namespace.ONLINE, "acme", "orders")
TOPIC = "/v1/tenants/acme/topics/orders"


@pytest.fixture
async def http() -> AsyncIterator[TestClient[Any, Any]]:
    config = MemoryConfigStore()
    await config.create_tenant(Tenant("acme", "", "0" * 64, 0.0))
    await config.create_topic(Topic(REF, 20, 1))
    app = make_app(Settings(admin_token="test-admin-token"), ApiSettings(), config,
                   MemoryQueueBackend(), rollout_store=MemoryRolloutStore())  # fmt: skip
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    yield client
    await client.close()


def registry(http: TestClient[Any, Any]) -> CollectorRegistry:
    assert http.app is not None
    registry: CollectorRegistry = http.app[API_KEY].metrics.registry
    return registry


def value(http: TestClient[Any, Any], name: str, **labels: str) -> float:
    return registry(http).get_sample_value(name, labels) or 0.0


async def call(http: TestClient[Any, Any], method: str, path: str, status: int, **kw: Any) -> Any:
    r = await http.request(method, path, headers=ADMIN | kw.pop("headers", {}), **kw)
    body = await r.json()
    assert r.status == status, body
    return body


def rollout(heartbeat_s: float = 5) -> dict[str, Any]:
    topic = {"name": "online/acme/orders", "namespace": "online", "tenant": "acme",
             "topic": "orders", "step": 0, "before": {"qps": 20, "groups": 1},
             "after": {"qps": 40, "groups": 1}}  # fmt: skip
    return {"plan": "plan.json", "canary_pct": 10, "watch_s": 5, "steps": 1, "topics": [topic],
            "heartbeat_s": heartbeat_s}  # fmt: skip


async def test_a_rollout_that_rolls_back_is_counted_once(http: TestClient[Any, Any]) -> None:
    ro = await call(http, "POST", "/v1/rollouts", 201, json=rollout())
    assert value(http, "emq_rollouts_started_total") == 1
    path = f"/v1/rollouts/{ro['id']}"
    await call(http, "PATCH", path, 200, json={"phase": "canary: watching"})
    assert value(http, "emq_rollouts_ended_total", state="rolled-back") == 0  # still running
    await call(http, "PATCH", path, 200, json={"state": "rolled-back", "reason": "backlog"})
    await call(http, "PATCH", path, 409, json={"state": "done"})  # ended: refused, not counted
    assert value(http, "emq_rollouts_ended_total", state="rolled-back") == 1
    assert value(http, "emq_rollouts_ended_total", state="done") == 0

    ro = await call(http, "POST", "/v1/rollouts", 201, json=rollout())
    await call(http, "PATCH", f"/v1/rollouts/{ro['id']}", 200, json={"state": "done"})
    assert value(http, "emq_rollouts_ended_total", state="done") == 1
    assert value(http, "emq_rollouts_started_total") == 2
    scraped = await (await http.get("/metrics")).text()
    assert 'emq_rollout_latest_state{state="done"} 1.0' in scraped
    assert 'emq_rollout_latest_state{state="rolled-back"} 0.0' in scraped


async def test_the_latest_rollout_reads_abandoned_when_its_cli_stops_beating(
    http: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("emq.api.metrics.TOPIC_REFRESH_S", 0.0)  # every scrape reads
    scraped = await (await http.get("/metrics")).text()
    assert "emq_rollout_latest_state{" not in scraped  # no rollout yet: no series
    await call(http, "POST", "/v1/rollouts", 201, json=rollout(heartbeat_s=0.1))
    await asyncio.sleep(0.4)  # more than 3 heartbeats without one
    scraped = await (await http.get("/metrics")).text()
    assert 'emq_rollout_latest_state{state="abandoned"} 1.0' in scraped
    assert 'emq_rollout_latest_state{state="running"} 0.0' in scraped
    assert value(http, "emq_rollouts_ended_total", state="abandoned") == 0  # not a request's


async def test_changes_are_counted_by_route_and_reverts_once(http: TestClient[Any, Any]) -> None:
    labels = {"namespace": "online", "tenant": "acme"}
    cli = {"X-EMQ-Change-Route": "cli"}
    await call(http, "PATCH", TOPIC, 200, json={"qps": 30}, headers=cli)
    assert value(http, "emq_changes_total", route="cli", **labels) == 1
    assert value(http, "emq_changes_total", route="api", **labels) == 0
    await call(http, "PATCH", TOPIC, 200, json={"qps": 30}, headers=cli)  # nothing changed
    await call(http, "PATCH", TOPIC, 422, json={"qps": -1})  # refused
    assert value(http, "emq_changes_total", route="cli", **labels) == 1
    await call(http, "PATCH", "/v1/tenants/acme", 200, json={"qps_cap": 100})
    assert value(http, "emq_changes_total", route="api", **labels) == 1

    (change, *_) = (await call(http, "GET", "/v1/changes?topic=orders", 200))["changes"]
    await call(http, "PATCH", TOPIC, 200, json={"qps": 40})
    await call(http, "POST", f"/v1/changes/{change['id']}/revert", 409)  # stale: not counted
    assert value(http, "emq_change_reverts_total", route="api", **labels) == 0
    await call(http, "POST", f"/v1/changes/{change['id']}/revert?force=true", 200)
    assert value(http, "emq_change_reverts_total", route="api", **labels) == 1
    assert value(http, "emq_changes_total", route="api", **labels) == 3  # cap, 40, the revert
    scraped = await (await http.get("/metrics")).text()
    assert 'emq_change_reverts_total{namespace="online",route="api",tenant="acme"} 1.0' in scraped

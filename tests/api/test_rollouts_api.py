"""``/v1/rollouts`` on the in-memory adapters: a rollout is started, PATCHed, shown as the
latest, refused once ended; the signals route counts the workers' history rows of the complete
intervals asked; bad input is one 4xx naming the field and stores nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from adapters.memory_rollouts import MemoryRolloutStore
from adapters.redis_history import MemoryHistoryStore
from emq.api import ApiSettings, make_app
from emq.api.enqueue import Enqueuer
from emq.core.interfaces import HistoryRow
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.settings import Settings
from tests.api.conftest import ADMIN

REF = TopicRef(Namespace.ONLINE, "acme", "orders")


@pytest.fixture
async def world() -> AsyncIterator[tuple[TestClient[Any, Any], MemoryHistoryStore, Enqueuer]]:
    config, queues, history = MemoryConfigStore(), MemoryQueueBackend(), MemoryHistoryStore()
    await config.create_tenant(Tenant("acme", "", "0" * 64, 0.0))
    await config.create_topic(Topic(REF, 20, 1))
    settings = Settings(admin_token="test-admin-token")
    app = make_app(settings, ApiSettings(history_interval_s=2), config, queues, history,
                   rollout_store=MemoryRolloutStore())  # fmt: skip
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    yield client, history, Enqueuer(config, queues)
    await client.close()


async def call(http: TestClient[Any, Any], method: str, path: str, status: int, **kw: Any) -> Any:
    r = await http.request(method, path, headers=ADMIN, **kw)
    body = await r.json()
    assert r.status == status, body
    return body


def started() -> dict[str, Any]:
    topic = {"name": "online/acme/orders", "namespace": "online", "tenant": "acme",
             "topic": "orders", "step": 0, "before": {"qps": 20, "groups": 1},
             "after": {"qps": 40, "groups": 1}}  # fmt: skip
    return {"plan": "plan.json", "canary_pct": 10, "watch_s": 5, "steps": 3, "topics": [topic]}


async def test_a_rollout_is_recorded_patched_and_ended(world: Any) -> None:
    http, _, _ = world
    await call(http, "GET", "/v1/rollouts/latest", 404)
    ro = await call(http, "POST", "/v1/rollouts", 201, json=started())
    assert ro["state"] == "running" and ro["actor"] == "admin" and ro["topics_done"] == 0
    path = f"/v1/rollouts/{ro['id']}"
    breach = {"signal": "backlog_growth", "figure": 9, "limit": 5, "text": "grew"}
    patch = {
        "phase": "canary",
        "topics": [
            {
                "name": "online/acme/orders",
                "status": "breached",
                "breaches": [breach],
                "signals": {"backlog": 9},
            }
        ],
    }
    await call(http, "PATCH", path, 200, json=patch)
    await call(http, "PATCH", path, 200, json={"state": "rolled-back", "reason": "why"})
    latest = await call(http, "GET", "/v1/rollouts/latest", 200)
    assert latest["id"] == ro["id"] and latest["state"] == "rolled-back"
    (topic,) = latest["topics"]
    assert topic["status"] == "breached" and topic["breaches"][0]["op"] == ">"
    assert (await call(http, "GET", path, 200))["reason"] == "why"
    ended = await call(http, "PATCH", path, 409, json={"phase": "again"})
    assert "rolled-back" in ended["error"]["message"]
    await call(http, "GET", "/v1/rollouts/ro_1_abcdef", 404)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"canary_pct": 0}, "canary_pct"),
        ({"canary_pct": 150}, "canary_pct"),
        ({"watch_s": 0}, "watch_s"),
        ({"topics": "x"}, "topics"),
        ({"surprise": 1}, "surprise"),
    ],
)
async def test_bad_rollouts_are_refused_and_nothing_is_stored(
    world: Any, body: dict[str, Any], field: str
) -> None:
    http, _, _ = world
    error = (await call(http, "POST", "/v1/rollouts", 422, json=started() | body))["error"]
    assert error["field"].startswith(field)
    await call(http, "GET", "/v1/rollouts/latest", 404)


async def test_whole_floats_are_integers_and_fractions_are_refused(world: Any) -> None:
    """JSON Schema's ``integer`` admits ``72.0``: the schema-valid request is taken (the OpenAPI
    fuzzer sends them); ``72.5`` is one 422 naming the field."""
    http, _, _ = world
    body = started()
    body["steps"] = 3.0
    body["topics"][0] |= {"step": 0.0, "before": {"qps": 20.0, "groups": 1}}
    ro = await call(http, "POST", "/v1/rollouts", 201, json=body)
    assert ro["steps"] == 3 and ro["topics"][0]["before"]["qps"] == 20
    path = f"/v1/rollouts/{ro['id']}"
    await call(http, "PATCH", path, 200, json={"step": 1.0})
    error = (await call(http, "PATCH", path, 422, json={"step": 1.5}))["error"]
    assert error["field"] == "step"
    assert (await call(http, "GET", path, 200))["step"] == 1


async def test_a_patch_of_an_unknown_topic_is_refused(world: Any) -> None:
    http, _, _ = world
    ro = await call(http, "POST", "/v1/rollouts", 201, json=started())
    body = {"topics": [{"name": "online/acme/other", "status": "healthy"}]}
    error = (await call(http, "PATCH", f"/v1/rollouts/{ro['id']}", 422, json=body))["error"]
    assert error["field"] == "topics[0].name"
    shown = await call(http, "GET", f"/v1/rollouts/{ro['id']}", 200)
    assert [t["status"] for t in shown["topics"]] == ["pending"]


def row(start: int, source: str, **counts: int) -> HistoryRow:
    return HistoryRow(start, 2, "online", "acme", "orders", source, **counts)


async def test_signals_count_the_complete_intervals_asked(world: Any) -> None:
    http, history, enqueuer = world
    await enqueuer.enqueue(REF, [{"url": "https://x.example/"}] * 7, batch=True)
    now = int(time.time()) // 2 * 2
    await history.record([
        row(now - 10, "w1", delivered=100),  # before since
        row(now - 6, "w1", delivered=30, failed=3, throttled_backlog=4),
        row(now - 6, "w2", delivered=10, throttled_backlog=1),
        row(now - 4, "w1", delivered=20, failed=1, throttled_backlog=2),
        row(now - 4, "api", delivered=999),  # the API's rows count enqueues, not answers
        row(now - 2, "w1", delivered=50),  # ends after until
    ])  # fmt: skip
    query = {"topics": "online/acme/orders", "since": now - 6, "until": now - 1}
    body = await call(http, "GET", "/v1/rollouts/signals", 200, params=query)
    assert body["interval_s"] == 2
    (s,) = body["topics"]
    assert (s["backlog"], s["delivered"], s["failed"], s["throttled"]) == (7, 60, 4, 2)
    assert s["covered_s"] == 4 and s["qps"] == 20


@pytest.mark.parametrize(
    ("query", "status", "field"),
    [
        ({"topics": "online/acme/nope", "since": 1}, 404, None),
        ({"topics": "acme/orders", "since": 1}, 422, "topics"),
        ({"topics": "online/acme/orders"}, 422, "since"),
        ({"topics": "online/acme/orders", "since": -1}, 422, "since"),
        ({"topics": ",".join(["online/acme/orders"] * 41), "since": 1}, 422, "topics"),
        ({"topics": "online/acme/orders,", "since": 1}, 422, "topics"),
    ],
)
async def test_bad_signal_queries(
    world: Any, query: dict[str, Any], status: int, field: str | None
) -> None:
    http, _, _ = world
    error = (await call(http, "GET", "/v1/rollouts/signals", status, params=query))["error"]
    assert error.get("field") == field


async def test_a_rollout_whose_cli_stopped_beating_reads_abandoned(world: Any) -> None:
    http, _, _ = world
    ro = await call(http, "POST", "/v1/rollouts", 201, json=started() | {"heartbeat_s": 0.1})
    path = f"/v1/rollouts/{ro['id']}"
    await call(http, "PATCH", path, 200, json={"phase": "canary: watching"})  # a beat
    await asyncio.sleep(0.4)  # more than 3 heartbeats without one
    shown = await call(http, "GET", "/v1/rollouts/latest", 200)
    assert shown["state"] == "abandoned" and "no heartbeat for" in shown["reason"]
    assert shown["phase"] == "canary: watching"

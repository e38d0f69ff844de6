"""Per-endpoint flow control over the API: the policy on create/PATCH/show, what workers post
shown in topic show, re-enable; and bad input changes nothing (real Redis and ZooKeeper)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from adapters.redis_endpoints import RedisEndpointBoard
from emq.api import ApiSettings, make_app
from emq.compose import open_config, open_endpoint_board, open_queues
from emq.core.model import Namespace, TopicRef
from emq.core.settings import Settings
from tests.api.conftest import ADMIN

TOPIC = "/v1/tenants/acme/topics/hooks"


@pytest.fixture
async def served(settings: Settings) -> AsyncIterator[tuple[TestClient, RedisEndpointBoard]]:
    queues = await open_queues(settings)
    config = await open_config(settings)
    board = open_endpoint_board(settings)
    assert isinstance(board, RedisEndpointBoard)
    app = make_app(settings, ApiSettings(), config, queues, endpoints=board)
    client = TestClient(TestServer(app))
    await client.start_server()
    r = await client.post("/v1/tenants", json={"tenant": "acme"}, headers=ADMIN)
    assert r.status == 201
    yield client, board
    await client.close()
    await board.aclose()
    await config.aclose()
    await queues.aclose()


async def test_policy_is_set_patched_shown_and_worker_status_is_listed(
    served: tuple[TestClient, RedisEndpointBoard],
) -> None:
    client, board = served
    body = {"topic": "hooks", "qps": 100, "endpoints": {"adaptive": True, "latency_ms": 800.0}}
    r = await client.post("/v1/tenants/acme/topics", json=body, headers=ADMIN)
    assert r.status == 201, await r.text()
    shown = (await r.json())["endpoints"]
    assert shown["adaptive"] is True and shown["latency_ms"] == 800 and shown["decrease"] == 0.7
    r = await client.patch(TOPIC, json={"endpoints": {"disable_after": 5}}, headers=ADMIN)
    shown = (await r.json())["endpoints"]
    assert shown["disable_after"] == 5 and shown["adaptive"] is True  # only what was given
    row = {
        "endpoint": "a.example:443",
        "state": "limited",
        "rate_qps": 42.0,
        "reason": "429 at t",
        "reason_at": 1.0,
        "hold_until": None,
        "parked": 3,
        "failures": 0,
        "throttled": 7,
    }
    ref = TopicRef(Namespace.ONLINE, "acme", "hooks")
    await board.publish("w1", {str(ref): [row]})
    r = await client.get(TOPIC, headers=ADMIN)
    assert (await r.json())["endpoint_status"] == [row | {"worker": "w1"}]
    await board.publish("w1", {str(ref): []})  # nothing followed any more
    r = await client.get(TOPIC, headers=ADMIN)
    assert (await r.json())["endpoint_status"] == []


async def test_enable_marks_the_policy_and_bad_input_changes_nothing(
    served: tuple[TestClient, RedisEndpointBoard],
) -> None:
    client, _ = served
    body = {"topic": "hooks", "qps": 10, "endpoints": {"disable_after": 3}}
    assert (await client.post("/v1/tenants/acme/topics", json=body, headers=ADMIN)).status == 201
    path = TOPIC + "/endpoints/enable"
    for bad, status in (
        ({"endpoint": "no-port"}, 422),
        ({"endpoint": "h:1", "x": 1}, 422),
        ({}, 422),
        ({"endpoint": 5}, 422),
    ):
        r = await client.post(path, json=bad, headers=ADMIN)
        assert r.status == status, (bad, await r.text())
        assert (await r.json())["error"]["code"]
    r = await client.post(path, json={"endpoint": "h:1"})
    assert r.status == 401
    r = await client.post("/v1/tenants/acme/topics/nope/endpoints/enable",
                          json={"endpoint": "h:1"}, headers=ADMIN)  # fmt: skip
    assert r.status == 404
    for bad_policy in ({"decrease": 1.5}, {"adaptive": "yes"}, {"nope": 1}, {"min_qps": 0}):
        r = await client.patch(TOPIC, json={"endpoints": bad_policy}, headers=ADMIN)
        assert r.status == 422, (bad_policy, await r.text())
    r = await client.post(path, json={"endpoint": "H.example:443"}, headers=ADMIN)
    assert r.status == 200, await r.text()
    answer = await r.json()
    assert answer["enabled"] == "h.example:443" and answer["endpoints"]["disable_after"] == 3
    r = await client.get(TOPIC, headers=ADMIN)
    assert (await r.json())["endpoints"] == answer["endpoints"]

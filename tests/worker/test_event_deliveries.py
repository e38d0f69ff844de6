"""Events end to end on real parts: the API (real HTTP, real Redis and ZooKeeper), an
``emq worker --standalone`` process, and real receivers, one per subscription, that verify
each delivery's Standard Webhooks signature with the standardwebhooks library and their own
subscription's secret (a delivery they cannot verify is answered 401, so it would retry and
never count); and events published into a transaction, delivered only once it commits."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from standardwebhooks import Webhook, WebhookVerificationError

from emq.api import ApiSettings, make_app
from emq.compose import open_jobs, open_subscriptions, open_transactions
from emq.core.settings import Settings
from tests.worker.conftest import SECRET, Stack

ADMIN = {"Authorization": "Bearer test-admin-token"}
TOPIC = "/v1/tenants/acme/topics/ev"


class Receivers:
    """One endpoint per subscription (``/<name>``), each verifying with its own secret."""

    def __init__(self) -> None:
        self.secrets: dict[str, str] = {}
        self.verified: dict[str, list[tuple[dict[str, str], Any]]] = {}
        self.bodies: dict[str, list[str]] = {}
        self.refused = 0
        self.base = ""

    async def handle(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = await request.text()
        try:
            payload = Webhook(self.secrets[name]).verify(body, dict(request.headers))
        except (WebhookVerificationError, KeyError):
            self.refused += 1
            return web.Response(status=401)
        self.verified.setdefault(name, []).append((dict(request.headers), payload))
        self.bodies.setdefault(name, []).append(body)
        return web.Response(status=200)


@pytest.fixture
async def receivers() -> AsyncIterator[Receivers]:
    r = Receivers()
    app = web.Application()
    app.router.add_post("/{name}", r.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    r.base = str(server.make_url("")).rstrip("/")
    yield r
    await server.close()


@pytest.fixture
async def api(stack: Stack, settings: Settings) -> AsyncIterator[TestClient]:
    jobs, subs = open_jobs(settings), open_subscriptions(settings)
    app = make_app(settings, ApiSettings(), stack.config, stack.queues, jobs=jobs,
                   subscription_store=subs)  # fmt: skip
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client
    await client.close()
    await subs.aclose()
    await jobs.aclose()


async def test_each_subscription_gets_its_events_signed_with_its_own_secret(
    stack: Stack, api: TestClient, receivers: Receivers, worker_process: Any
) -> None:
    await stack.topic("ev", 200)  # two groups: keyed deliveries hash apart
    subs: dict[str, dict[str, Any]] = {}
    for name, patterns in (("inv", ["invoice.*"]), ("all", ["*"]), ("ord", ["order.*"])):
        body = {"url": f"{receivers.base}/{name}", "event_types": patterns}
        r = await api.post(TOPIC + "/subscriptions", headers=ADMIN, json=body)
        assert r.status == 201, await r.text()
        subs[name] = await r.json()
        receivers.secrets[name] = subs[name]["secret"]
    events = [
        {"type": "invoice.paid", "payload": {"n": 0}, "key": "c1"},
        {"type": "invoice.paid", "payload": {"n": 1}, "key": "c1"},
        {"type": "order.made", "payload": {"n": 2}},
        {"type": "user.seen", "payload": {"n": 3}},
    ]
    r = await api.post(TOPIC + "/events", json={"events": events}, headers=ADMIN)
    accepted = (await r.json())["events"]
    assert r.status == 202 and [e["deliveries"] for e in accepted] == [2, 2, 2, 1]
    worker = worker_process()

    async def all_in() -> bool:
        while sum(len(v) for v in receivers.verified.values()) < 7:
            await asyncio.sleep(0.05)
        return True

    assert await asyncio.wait_for(all_in(), 30), worker.log()
    assert receivers.refused == 0
    got = {name: [p["data"]["n"] for _, p in rows] for name, rows in receivers.verified.items()}
    assert got["inv"] == [0, 1]  # key c1: in order, per subscription
    assert sorted(got["all"]) == [0, 1, 2, 3] and got["all"].index(0) < got["all"].index(1)
    assert got["ord"] == [2]
    ids = [h["webhook-id"] for rows in receivers.verified.values() for h, _ in rows]
    assert len(set(ids)) == 7  # unique per (event, subscription)
    for rows in receivers.verified.values():
        for headers, payload in rows:
            n = payload["data"]["n"]
            assert headers["emq-event-id"] == accepted[n]["event_id"]
            assert headers["emq-event-type"] == payload["type"] == events[n]["type"]
    body, headers = receivers.bodies["ord"][0], receivers.verified["ord"][0][0]
    for other in (SECRET, receivers.secrets["all"]):  # not the topic's secret, not another's
        with pytest.raises(WebhookVerificationError):
            Webhook(other).verify(body, headers)

    async def delivered() -> dict[str, str]:
        while True:
            r = await api.get(f"{TOPIC}/events/{accepted[0]['event_id']}", headers=ADMIN)
            states = {d["subscription"]: d["state"] for d in (await r.json())["deliveries"]}
            if set(states.values()) == {"delivered"}:
                return states
            await asyncio.sleep(0.1)

    states = await asyncio.wait_for(delivered(), 15)
    assert set(states) == {subs["inv"]["id"], subs["all"]["id"]}


@pytest.fixture
async def tx_api(stack: Stack, settings: Settings) -> AsyncIterator[TestClient]:
    settings = dataclasses.replace(
        settings, push_allow_cidrs=(ipaddress.ip_network("127.0.0.0/8"),)
    )
    jobs, subs, txs = open_jobs(settings), open_subscriptions(settings), open_transactions(settings)
    app = make_app(settings, ApiSettings(), stack.config, stack.queues, jobs=jobs,
                   subscription_store=subs, transaction_store=txs)  # fmt: skip
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client
    await client.close()
    for closing in (txs, subs, jobs):
        await closing.aclose()


async def test_events_in_a_transaction_are_delivered_signed_only_after_the_commit(
    stack: Stack, tx_api: TestClient, receivers: Receivers, worker_process: Any
) -> None:
    await stack.topic("ev", 100)
    body = {"url": f"{receivers.base}/inv", "event_types": ["invoice.*"]}
    r = await tx_api.post(TOPIC + "/subscriptions", headers=ADMIN, json=body)
    receivers.secrets["inv"] = (await r.json())["secret"]
    opening = {"check_url": "http://127.0.0.1:9/never", "timeout_s": 600}
    r = await tx_api.post(TOPIC + "/transactions", headers=ADMIN, json=opening)
    tx_id = (await r.json())["transaction_id"]
    r = await tx_api.post(TOPIC + "/events", params={"transaction_id": tx_id}, headers=ADMIN,
                          json={"type": "invoice.paid", "payload": {"n": 1}})  # fmt: skip
    assert r.status == 202, await r.text()
    event_id = (await r.json())["event_id"]
    worker = worker_process()

    async def status() -> str:
        r = await tx_api.get(f"{TOPIC}/events/{event_id}", headers=ADMIN)
        (delivery,) = (await r.json())["deliveries"]
        return str(delivery["state"])

    await asyncio.sleep(1.0)  # a running worker: nothing of an open transaction reaches it
    assert receivers.verified == {} and await status() == "prepared"
    r = await tx_api.post(f"{TOPIC}/transactions/{tx_id}/commit", headers=ADMIN)
    assert r.status == 200

    async def delivered() -> None:
        while await status() != "delivered":
            await asyncio.sleep(0.05)

    await asyncio.wait_for(delivered(), 10)
    assert receivers.refused == 0, worker.log()
    ((headers, payload),) = receivers.verified["inv"]  # verified with the subscription's secret
    assert headers["emq-event-id"] == event_id and payload["data"] == {"n": 1}

"""Subscriptions and events through the API on real Redis and ZooKeeper: CRUD by the tenant and
the admin, the secret shown once (at creation and rotation), events answered 202 with their
deliveries (0 when nothing matches), batches, the event's delivery states, and bad input as one
clear 4xx that changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from emq.api import ApiSettings, make_app
from emq.api import subscriptions as subscription_routes
from emq.compose import open_config, open_jobs, open_queues, open_subscriptions
from emq.core.settings import Settings
from tests.api.conftest import ADMIN, Api

TOPIC = "/v1/tenants/acme/topics/billing"
SUBS = TOPIC + "/subscriptions"


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    from aiohttp.test_utils import TestClient, TestServer

    queues = await open_queues(settings)
    config = await open_config(settings)
    jobs, subs = open_jobs(settings), open_subscriptions(settings)
    app = make_app(settings, ApiSettings(), config, queues, jobs=jobs, subscription_store=subs)
    client = TestClient(TestServer(app))
    await client.start_server()
    yield Api(client, queues, config, settings)
    await client.close()
    await subs.aclose()
    await jobs.aclose()
    await config.aclose()
    await queues.aclose()


async def _create(api: Api, auth: dict[str, str], **body: Any) -> dict[str, Any]:
    body = {"url": "https://hooks.example/a", "event_types": ["invoice.*"]} | body
    r = await api.client.post(SUBS, json=body, headers=auth)
    assert r.status == 201, await r.text()
    return dict(await r.json())


async def test_crud_by_tenant_and_admin_and_the_secret_is_shown_once(api: Api) -> None:
    tenant = await api.tenant("acme")
    await api.topic("acme", "billing", 100)
    made = await _create(api, tenant, headers={"X-Team": "a"})
    assert made["secret"].startswith("whsec_") and made["enabled"] is True
    by_admin = await _create(api, ADMIN, event_types=["*"], enabled=False)
    r = await api.client.get(SUBS, headers=tenant)
    listed = (await r.json())["subscriptions"]
    assert [s["id"] for s in listed] == [made["id"], by_admin["id"]]
    assert all("secret" not in s for s in listed) and (await r.json())["limit"] == 1000
    r = await api.client.get(f"{SUBS}/{made['id']}", headers=tenant)
    assert r.status == 200 and "secret" not in await r.json()
    r = await api.client.patch(
        f"{SUBS}/{made['id']}", json={"event_types": ["order.*"], "enabled": False}, headers=tenant
    )
    changed = await r.json()
    assert (r.status, changed["event_types"], changed["enabled"]) == (200, ["order.*"], False)
    assert changed["headers"] == {"X-Team": "a"} and changed["url"] == made["url"]
    r = await api.client.post(f"{SUBS}/{made['id']}/rotate-secret", headers=tenant)
    rotated = await r.json()
    assert r.status == 200 and rotated["secret"] not in (made["secret"], None)
    r = await api.client.delete(f"{SUBS}/{made['id']}", headers=tenant)
    assert r.status == 200 and await r.json() == {"id": made["id"], "deleted": True}
    r = await api.client.delete(f"{SUBS}/{made['id']}", headers=tenant)
    assert r.status == 200 and (await r.json())["deleted"] is False  # a repeat changes nothing
    r = await api.client.get(f"{SUBS}/{made['id']}", headers=tenant)
    assert r.status == 404
    other = await api.tenant("other")
    r = await api.client.get(SUBS, headers=other)
    assert r.status == 404  # another tenant's topic does not exist for it


async def test_events_are_accepted_with_their_deliveries_and_shown(api: Api) -> None:
    tenant = await api.tenant("acme")
    await api.topic("acme", "billing", 300)
    a = await _create(api, tenant)
    b = await _create(api, tenant, event_types=["*"])
    await _create(api, tenant, event_types=["*"], enabled=False)
    r = await api.client.post(TOPIC + "/events", json={"type": "invoice.paid", "payload": {"n": 1}},
                              headers=tenant)  # fmt: skip
    assert r.status == 202, await r.text()
    one = await r.json()
    assert one["deliveries"] == 2 and one["event_id"].startswith("evt_")
    r = await api.client.post(TOPIC + "/events", json={"type": "nothing.here"}, headers=tenant)
    assert r.status == 202 and (await r.json())["deliveries"] == 1  # b's "*"
    r = await api.client.patch(f"{SUBS}/{b['id']}", json={"enabled": False}, headers=tenant)
    r = await api.client.post(TOPIC + "/events", json={"type": "order.made"}, headers=tenant)
    assert (await r.json())["deliveries"] == 0  # a change applies to the events after it
    batch = {"events": [{"type": "invoice.a"}, {"type": "invoice.b", "idempotency_key": "k"}]}
    r = await api.client.post(TOPIC + "/events", json=batch, headers=ADMIN)
    assert [e["deliveries"] for e in (await r.json())["events"]] == [1, 1]
    r = await api.client.post(TOPIC + "/events", json=batch["events"][1], headers=ADMIN)
    assert (await r.json())["duplicates"] == 1
    r = await api.client.get(f"{TOPIC}/events/{one['event_id']}", headers=tenant)
    shown = await r.json()
    assert r.status == 200 and shown["type"] == "invoice.paid"
    assert {d["subscription"] for d in shown["deliveries"]} == {a["id"], b["id"]}
    assert {d["state"] for d in shown["deliveries"]} <= {"queued", "buffered", "in_flight"}
    r = await api.client.get(f"{TOPIC}/events/evt_{'0' * 32}", headers=tenant)
    assert r.status == 404


async def test_bad_input_is_one_clear_4xx_and_changes_nothing(
    api: Api, snapshot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = await api.tenant("acme")
    await api.topic("acme", "billing", 100)
    made = await _create(api, tenant)
    monkeypatch.setattr(subscription_routes, "MAX_SUBSCRIPTIONS", 1)
    before = await snapshot()
    cases: list[tuple[str, str, dict[str, Any], int, str | None]] = [
        ("post", SUBS, {"url": "https://h.example/", "event_types": ["*"]}, 422, "subscription"),
        ("post", SUBS, {"url": "ftp://h.example/", "event_types": ["*"]}, 422, "url"),
        ("post", SUBS, {"url": "https://h.example/", "event_types": []}, 422, "event_types"),
        ("post", SUBS, {"url": "https://h.example/", "event_types": ["a b"]}, 422,
         "event_types[0]"),
        ("post", SUBS, {"url": "https://h.example/", "event_types": ["x" * 129]}, 422,
         "event_types[0]"),
        ("post", SUBS, {"url": "https://h.example/", "event_types": ["*"],
                        "headers": {"emq-event-id": "x"}}, 422, "headers.emq-event-id"),
        ("post", SUBS, {"url": "https://h.example/", "event_types": ["*"],
                        "headers": {"webhook-id": "x"}}, 422, "headers.webhook-id"),
        ("patch", f"{SUBS}/{made['id']}", {}, 422, None),
        ("patch", f"{SUBS}/{made['id']}", {"colour": "red"}, 422, "colour"),
        ("post", TOPIC + "/events", {"type": "a b"}, 422, "type"),
        ("post", TOPIC + "/events", {"payload": {}}, 422, "type"),
        ("post", TOPIC + "/events", {"type": "a", "priority": "urgent"}, 422, "priority"),
        ("post", TOPIC + "/events", {"events": [{"type": "a"}] * 1001}, 413, "events"),
        ("post", TOPIC + "/events", {"type": "invoice.x", "payload": "x" * 300_000}, 413,
         "payload"),
        ("patch", f"{SUBS}/sub_{'0' * 16}", {"enabled": True}, 404, None),
        ("post", f"{SUBS}/nope/rotate-secret", {}, 404, None),
    ]  # fmt: skip
    for method, path, body, status, field in cases:
        r = await api.client.request(method, path, json=body, headers=tenant)
        error = (await r.json())["error"]
        assert (r.status, error.get("field")) == (status, field), (path, body, error)
    assert await snapshot() == before

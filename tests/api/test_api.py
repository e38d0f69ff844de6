"""The HTTP API end to end on real Redis and ZooKeeper."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import Counter
from typing import Any

from kazoo.client import KazooClient

from adapters.zk_config import decode_topic
from emq.core.interfaces import ZERO_OFFSET, DeadLetter
from emq.core.model import Namespace, Priority, TopicRef
from tests.api.conftest import ADMIN, Api

JOB = {"url": "https://example.com/hook", "body": {"n": 1}}


async def test_tenant_is_created_once_with_a_token_stored_hashed(
    api: Api, zk_client: KazooClient
) -> None:
    r = await api.client.post("/v1/tenants", json={"tenant": "acme", "name": "Acme"}, headers=ADMIN)
    assert r.status == 201
    body = await r.json()
    token = body["token"]
    assert body["tenant"] == "acme" and token.startswith("acme.")
    data, _ = zk_client.get("/emq/tenants/acme")
    stored = json.loads(data)
    assert stored["token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert token not in data.decode()
    again = await api.client.post("/v1/tenants", json={"tenant": "acme"}, headers=ADMIN)
    assert again.status == 409
    listed = await (await api.client.get("/v1/tenants", headers=ADMIN)).json()
    assert [t["tenant"] for t in listed["tenants"]] == ["acme"]


async def test_topic_groups_follow_the_split_rule(api: Api) -> None:
    await api.tenant("acme")
    topic = await api.topic("acme", "orders", 1000)
    assert topic["groups"] == 7
    assert sum(topic["group_qps"]) == 1000 and max(topic["group_qps"]) <= 150
    assert topic["secret"].startswith("whsec_")
    small = await api.topic("acme", "sms", 100, namespace="sandbox")
    assert small["groups"] == 1 and small["namespace"] == "sandbox"
    r = await api.client.get("/v1/tenants/acme/topics/sms?namespace=sandbox", headers=ADMIN)
    assert r.status == 200 and "secret" not in await r.json()
    assert (await api.client.get("/v1/tenants/acme/topics/sms", headers=ADMIN)).status == 404


async def test_enqueue_one_and_a_batch_then_show_backlog(api: Api) -> None:
    headers = await api.tenant("acme")
    await api.topic("acme", "orders", 300)
    url = "/v1/tenants/acme/topics/orders/jobs"
    one = await api.client.post(url, json=JOB | {"priority": "high"}, headers=headers)
    assert one.status == 202
    assert len((await one.json())["ids"]) == 1
    batch = await api.client.post(url, json={"jobs": [JOB] * 1000}, headers=headers)
    assert batch.status == 202
    body = await batch.json()
    assert len(set(body["ids"])) == 1000 and body["duplicates"] == 0
    shown = await (await api.client.get("/v1/tenants/acme/topics/orders", headers=headers)).json()
    assert shown["backlog"] == {"high": 1, "medium": 1000, "low": 0}
    assert [g["backlog"]["medium"] for g in shown["per_group"]] == [500, 500]


async def test_same_key_lands_in_one_group_in_order(api: Api) -> None:
    headers = await api.tenant("acme")
    await api.topic("acme", "orders", 1000)
    jobs = [JOB | {"key": "user-7", "body": str(i)} for i in range(50)]
    r = await api.client.post(
        "/v1/tenants/acme/topics/orders/jobs", json={"jobs": jobs}, headers=headers
    )
    assert r.status == 202
    ref = TopicRef(Namespace.ONLINE, "acme", "orders")
    found = {}
    for g in range(7):
        q = ref.group(g).queue(Priority.MEDIUM)
        found |= await api.queues.read({q: ZERO_OFFSET}, 100)
    assert len(found) == 1
    (entries,) = found.values()
    assert [json.loads(e.payload)["job"]["body"] for e in entries] == [str(i) for i in range(50)]


async def test_keyless_jobs_spread_evenly(api: Api) -> None:
    headers = await api.tenant("acme")
    await api.topic("acme", "orders", 1000)
    r = await api.client.post(
        "/v1/tenants/acme/topics/orders/jobs", json={"jobs": [JOB] * 700}, headers=headers
    )
    assert r.status == 202
    shown = await (await api.client.get("/v1/tenants/acme/topics/orders", headers=headers)).json()
    assert [g["backlog"]["medium"] for g in shown["per_group"]] == [100] * 7


async def test_idempotency_key_deduplicates_and_counts(api: Api) -> None:
    headers = await api.tenant("acme")
    await api.topic("acme", "orders", 100)
    url = "/v1/tenants/acme/topics/orders/jobs"
    first = await (
        await api.client.post(url, json=JOB | {"idempotency_key": "op-1"}, headers=headers)
    ).json()
    jobs = [JOB | {"idempotency_key": "op-1"}, JOB | {"idempotency_key": "op-2"}]
    second = await (await api.client.post(url, json={"jobs": jobs}, headers=headers)).json()
    assert second["duplicates"] == 1
    assert second["ids"][0] == first["ids"][0]
    shown = await (await api.client.get("/v1/tenants/acme/topics/orders", headers=headers)).json()
    assert shown["backlog"]["medium"] == 2


async def test_delayed_jobs_wait_durably_then_become_due(api: Api) -> None:
    headers = await api.tenant("acme")
    await api.topic("acme", "orders", 100)
    r = await api.client.post(
        "/v1/tenants/acme/topics/orders/jobs", json=JOB | {"delay_s": 0.5}, headers=headers
    )
    assert r.status == 202
    group = TopicRef(Namespace.ONLINE, "acme", "orders").group(0)
    shown = await (await api.client.get("/v1/tenants/acme/topics/orders", headers=headers)).json()
    assert shown["delayed"] == 1 and shown["backlog"]["medium"] == 0
    assert await api.queues.promote_due(group, int(time.time() * 1000), 100) == 0
    await asyncio.sleep(0.6)
    assert await api.queues.promote_due(group, int(time.time() * 1000), 100) == 1
    shown = await (await api.client.get("/v1/tenants/acme/topics/orders", headers=headers)).json()
    assert shown["delayed"] == 0 and shown["backlog"]["medium"] == 1


async def test_patch_changes_quota_and_pause_live(api: Api) -> None:
    await api.tenant("acme")
    await api.topic("acme", "orders", 100)
    url = "/v1/tenants/acme/topics/orders"
    r = await api.client.patch(url, json={"qps": 1000, "paused": True}, headers=ADMIN)
    assert r.status == 200
    body = await r.json()
    assert (body["qps"], body["groups"], body["paused"]) == (1000, 7, True)
    lowered = await (await api.client.patch(url, json={"qps": 200}, headers=ADMIN)).json()
    assert lowered["groups"] == 7 and sum(lowered["group_qps"]) == 200
    stored = await api.config.get_topic(TopicRef(Namespace.ONLINE, "acme", "orders"))
    assert (stored.qps, stored.groups, stored.paused) == (200, 7, True)


async def test_dlq_retention_is_set_at_create_and_patch_and_shown(
    api: Api, zk_client: KazooClient
) -> None:
    await api.tenant("acme")
    plain = await api.topic("acme", "plain", 100)
    assert (plain["dlq_max_entries"], plain["dlq_max_age_s"]) == (100_000, 14 * 86400)
    made = await api.topic("acme", "orders", 100, dlq_max_entries=500, dlq_max_age_s=3600)
    assert (made["dlq_max_entries"], made["dlq_max_age_s"]) == (500, 3600)
    url = "/v1/tenants/acme/topics/orders"
    r = await api.client.patch(url, json={"dlq_max_age_s": 86400}, headers=ADMIN)
    assert r.status == 200 and (await r.json())["dlq_max_age_s"] == 86400
    shown = await (await api.client.get(url, headers=ADMIN)).json()
    assert (shown["dlq_max_entries"], shown["dlq_max_age_s"]) == (500, 86400)
    ref = TopicRef(Namespace.ONLINE, "acme", "orders")
    stored = await api.config.get_topic(ref)
    assert stored.dlq_retention.max_entries == 500 and stored.dlq_retention.max_age_s == 86400
    for bad in ({"dlq_max_entries": 0}, {"dlq_max_age_s": 59}, {"dlq_max_entries": "9"}):
        r = await api.client.patch(url, json=bad, headers=ADMIN)
        assert r.status == 422, bad
    r = await api.client.post(
        "/v1/tenants/acme/topics", json={"topic": "x", "qps": 1, "dlq_max_age_s": 0}, headers=ADMIN
    )
    assert r.status == 422
    # A topic stored before DLQ retention existed reads back with the defaults.
    path = next(p for p in _walk(zk_client, "/") if p.endswith("/acme/orders"))
    raw = json.loads(zk_client.get(path)[0])
    assert (raw["dlq_max_entries"], raw["dlq_max_age_s"]) == (500, 86400)
    del raw["dlq_max_entries"], raw["dlq_max_age_s"]
    old = decode_topic(ref, json.dumps(raw).encode())
    assert (old.dlq_max_entries, old.dlq_max_age_s, old.qps) == (100_000, 14 * 86400, 100)


def _walk(zk: KazooClient, path: str) -> list[str]:
    children = zk.get_children(path)
    found = [path]
    for child in children:
        found += _walk(zk, f"{path.rstrip('/')}/{child}")
    return found


async def test_dlq_list_pages_and_replay(api: Api) -> None:
    headers = await api.tenant("acme")
    await api.topic("acme", "orders", 300)
    ref = TopicRef(Namespace.ONLINE, "acme", "orders")
    r = await api.client.post(
        "/v1/tenants/acme/topics/orders/jobs", json={"jobs": [JOB] * 4}, headers=headers
    )
    ids = (await r.json())["ids"]
    for g in (0, 1):
        group = ref.group(g)
        await api.queues.claim(group, 1)
        entries = await api.queues.read({group.queue(Priority.MEDIUM): ZERO_OFFSET}, 10)
        letters = [
            DeadLetter("", Priority.MEDIUM, e.payload, "HTTP 500", 500, 8, 1_700_000_000_000)
            for e in entries[group.queue(Priority.MEDIUM)]
        ]
        await api.queues.dead_letter(group, 1, letters)
    url = "/v1/tenants/acme/topics/orders/dlq"
    page = await (await api.client.get(url + "?limit=3", headers=headers)).json()
    assert len(page["dead"]) == 3 and page["next_cursor"]
    rest = await (
        await api.client.get(url, params={"cursor": page["next_cursor"]}, headers=headers)
    ).json()
    assert len(rest["dead"]) == 1 and rest["next_cursor"] is None
    listed = page["dead"] + rest["dead"]
    assert sorted(d["job_id"] for d in listed) == sorted(ids)
    assert listed[0]["error"] == "HTTP 500" and listed[0]["attempts"] == 8
    one = await api.client.post(url + "/replay", json={"ids": [listed[0]["id"]]}, headers=headers)
    assert (await one.json())["replayed"] == 1
    rest = await api.client.post(url + "/replay", json={}, headers=headers)
    assert (await rest.json())["replayed"] == 3
    assert (await (await api.client.get(url, headers=headers)).json())["dead"] == []


async def test_tenant_token_sees_only_its_own_tenant(api: Api) -> None:
    acme = await api.tenant("acme")
    await api.tenant("globex")
    await api.topic("acme", "orders", 100)
    await api.topic("globex", "orders", 100)
    assert (await api.client.get("/v1/tenants/acme/topics/orders", headers=acme)).status == 200
    assert (await api.client.get("/v1/tenants/acme/topics", headers=acme)).status == 200
    other = await api.client.get("/v1/tenants/globex/topics/orders", headers=acme)
    assert other.status == 404
    assert (await other.json())["error"]["code"] == "not_found"


async def test_health_metrics_and_openapi(api: Api) -> None:
    health = await api.client.get("/healthz")
    assert health.status == 200
    assert await health.json() == {"status": "ok", "redis": "ok", "zookeeper": "ok"}
    headers = await api.tenant("acme")
    await api.topic("acme", "orders", 100)
    await api.client.post(
        "/v1/tenants/acme/topics/orders/jobs", json={"jobs": [JOB] * 3}, headers=headers
    )
    text = await (await api.client.get("/metrics")).text()
    assert 'emq_jobs_enqueued_total{namespace="online",tenant="acme",topic="orders"} 3.0' in text
    assert "emq_api_request_duration_seconds_bucket" in text
    spec = await (await api.client.get("/openapi.json")).json()
    documented = {
        (p, m.upper()) for p, ops in spec["paths"].items() for m in ops if m != "parameters"
    }
    served = {
        (r.resource.canonical, r.method)
        for r in api.client.app.router.routes()
        if r.method != "HEAD"
    }
    assert documented == served


async def test_many_topics_and_requests_at_once(api: Api) -> None:
    headers = await api.tenant("acme")
    for i in range(5):
        await api.topic("acme", f"t{i}", 150)
    sends = [
        api.client.post(
            f"/v1/tenants/acme/topics/t{i % 5}/jobs", json={"jobs": [JOB] * 20}, headers=headers
        )
        for i in range(50)
    ]
    statuses = Counter(r.status for r in await asyncio.gather(*sends))
    assert statuses == {202: 50}
    for i in range(5):
        shown = await (
            await api.client.get(f"/v1/tenants/acme/topics/t{i}", headers=headers)
        ).json()
        assert shown["backlog"]["medium"] == 200


async def test_show_reports_delivered_rate_and_enqueues_are_recorded(api: Api) -> None:
    assert api.history is not None
    headers = await api.tenant("acme")
    await api.topic("acme", "orders", 100)
    await api.client.post(
        "/v1/tenants/acme/topics/orders/jobs", json={"jobs": [JOB] * 7}, headers=headers
    )
    await api.history.publish_rates("w1", {"online/acme/orders": 40.5, "online/acme/other": 9.0})
    await api.history.publish_rates("w2", {"online/acme/orders": 2.0})
    shown = await (await api.client.get("/v1/tenants/acme/topics/orders", headers=headers)).json()
    assert shown["delivered_per_s"] == 42.5
    rows: list[Any] = []
    for _ in range(40):
        rows = [r for b in [b async for b in api.history.read()] for r in b if r.source == "api"]
        if rows:
            break
        await asyncio.sleep(0.1)
    assert sum(r.enqueued for r in rows) == 7
    assert rows[0].topic == "orders" and rows[0].quota == 100 and rows[0].groups == 1

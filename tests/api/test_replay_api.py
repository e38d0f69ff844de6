"""DLQ replays through the API (issue 16, item 4): a replay is a resource that POST creates
(201 with its id), GET shows (total, replayed, skipped, remaining, rate, state) and lists, and
DELETE or POST .../cancel cancels; bad input is one 4xx naming the field and changes nothing."""

from __future__ import annotations

import time
from typing import Any

from emq.core.interfaces import DeadLetter
from emq.core.model import Envelope, GroupRef, Job, Namespace, Priority, TopicRef
from tests.api.conftest import ADMIN, Api

DLQ = "/v1/tenants/acme/topics/orders/dlq"


async def _setup(api: Api, letters: int = 4) -> dict[str, str]:
    tenant = await api.tenant("acme")
    await api.topic("acme", "orders", 200)  # two groups
    now = int(time.time() * 1000)
    for g in (0, 1):
        dead = [
            DeadLetter("", Priority.LOW, Envelope(f"j{g}{i}", Job(url="https://e.x/"), now)
                       .encode(), "HTTP 500", 500, 8, now)
            for i in range(letters)
        ]  # fmt: skip
        group = GroupRef(TopicRef(Namespace.ONLINE, "acme", "orders"), g)
        await api.queues.dead_letter(group, 0, dead)
    return tenant


async def test_create_show_list_and_cancel(api: Api) -> None:
    tenant = await _setup(api)
    r = await api.client.post(DLQ + "/replays", json={}, headers=tenant)
    assert r.status == 201, await r.text()
    made: dict[str, Any] = await r.json()
    assert made["state"] == "running" and made["mode"] == "all"
    assert (made["total"], made["replayed"], made["remaining"]) == (8, 0, 8)
    assert made["rate"] == 10.0  # the default: 5% of the quota (200)
    r = await api.client.get(f"{DLQ}/replays/{made['id']}", headers=tenant)
    assert r.status == 200 and (await r.json())["id"] == made["id"]
    r = await api.client.post(DLQ + "/replays", json={"ids": ["1:0-1"], "rate": 2}, headers=ADMIN)
    assert r.status == 201, await r.text()
    by_ids = await r.json()
    assert (by_ids["mode"], by_ids["total"], by_ids["rate"]) == ("ids", 1, 2.0)
    r = await api.client.get(DLQ + "/replays", headers=tenant)
    assert [x["id"] for x in (await r.json())["replays"]] == [by_ids["id"], made["id"]]
    r = await api.client.delete(f"{DLQ}/replays/{made['id']}", headers=tenant)
    assert r.status == 200 and (await r.json())["state"] == "cancelled"
    r = await api.client.post(f"{DLQ}/replays/{by_ids['id']}/cancel", headers=tenant)
    cancelled = await r.json()
    assert (r.status, cancelled["state"], cancelled["remaining"]) == (200, "cancelled", 1)
    r = await api.client.post(f"{DLQ}/replays/{by_ids['id']}/cancel", headers=tenant)
    assert r.status == 200  # cancelling again changes nothing
    window = {"since": time.time() - 60, "until": time.time() + 60}
    r = await api.client.post(DLQ + "/replays", json=window, headers=tenant)
    assert (await r.json())["mode"] == "window" and (await r.json())["total"] == 8


async def test_bad_input_is_one_clear_error_and_changes_nothing(api: Api, snapshot: Any) -> None:
    tenant = await _setup(api)
    before = await snapshot()
    cases: list[tuple[dict[str, Any], str | None]] = [
        ({"rate": 0}, "rate"),
        ({"rate": "fast"}, "rate"),
        ({"ids": ["0:1-1"], "since": 1.0}, "ids"),
        ({"since": 100.0, "until": 50.0}, "until"),
        ({"ids": ["7:1-1"]}, "ids"),  # the topic has two groups
        ({"ids": []}, "ids"),
        ({"speed": 1}, "speed"),
    ]
    for body, field in cases:
        r = await api.client.post(DLQ + "/replays", json=body, headers=tenant)
        error = (await r.json())["error"]
        assert (r.status, error.get("field")) == (422, field), (body, error)
    for path in (f"{DLQ}/replays/rpl_{'0' * 20}", f"{DLQ}/replays/nope"):
        r = await api.client.get(path, headers=tenant)
        assert r.status == 404, await r.text()
        r = await api.client.delete(path, headers=tenant)
        assert r.status == 404, await r.text()
    other = await api.tenant("other")
    r = await api.client.post(DLQ + "/replays", json={}, headers=other)
    assert r.status == 404  # another tenant's topic is unknown to it
    r = await api.client.post("/v1/tenants/acme/topics/nope/dlq/replays", json={}, headers=tenant)
    assert r.status == 404
    after = await snapshot()
    assert after[0] == before[0]  # Redis unchanged (the other tenant lives in ZooKeeper)

"""Per-topic enqueue-to-delivery p50/p99 in the topic answers, read from the latency board in the
test's real Redis (what workers add to once a second, see tests/worker/test_history_rates.py)."""

from __future__ import annotations

import redis.asyncio as aioredis

from adapters.redis_latency import RedisLatencyBoard
from emq.core.latency import BUCKETS, E2E_BUCKETS_S
from emq.core.naming import RedisKeys
from tests.api.conftest import ADMIN, Api


def at(bound: float, n: int) -> list[int]:
    counts = [0] * BUCKETS
    counts[E2E_BUCKETS_S.index(bound)] = n
    return counts


async def test_topic_answers_carry_the_last_minutes_p99_added_up_across_workers(api: Api) -> None:
    assert api.history is not None
    headers = await api.tenant("acme")
    await api.topic("acme", "orders", 100)
    await api.topic("acme", "idle", 10)
    board = api.history
    # Two workers own groups of the topic: 98 fast deliveries in all, 2 slow ones.
    slow = [a + b for a, b in zip(at(0.1, 38), at(5, 2), strict=True)]
    await board.add_latency({"online/acme/orders": at(0.1, 60)})  # type: ignore[attr-defined]
    await board.add_latency({"online/acme/orders": slow})  # type: ignore[attr-defined]

    shown = await (await api.client.get("/v1/tenants/acme/topics/orders", headers=headers)).json()
    assert 50 <= shown["p50_ms"] <= 100  # within the bucket 0.05-0.1 s
    assert 2500 < shown["p99_ms"] <= 5000  # the 99th of 100 is a slow one
    assert shown["latency_window_s"] == 60

    listed = await (await api.client.get("/v1/topics", headers=headers)).json()
    by_name = {t["topic"]: t for t in listed["topics"]}
    assert by_name["orders"]["p99_ms"] == shown["p99_ms"]
    assert by_name["idle"]["p99_ms"] is None and by_name["idle"]["p50_ms"] is None


async def test_the_board_keeps_each_slot_for_its_window_only(
    redis_client: aioredis.Redis, test_id: str
) -> None:
    board = RedisLatencyBoard(redis_client, RedisKeys(test_id))
    await board.add_latency({"online/acme/t": at(1, 3), "online/acme/none": [0] * BUCKETS})
    assert await board.latency_window(["online/acme/t", "online/acme/none"]) == {
        "online/acme/t": at(1, 3)
    }
    client = redis_client
    keys = [k async for k in client.scan_iter(match=f"{test_id}:lat:*")]
    assert len(keys) == 1
    ttl = await client.ttl(keys[0])
    assert 0 < ttl <= 90  # gone on its own once out of every window


async def test_admin_sees_p99_of_every_tenant(api: Api) -> None:
    await api.tenant("acme")
    await api.topic("acme", "orders", 100)
    await api.history.add_latency({"online/acme/orders": at(0.25, 10)})  # type: ignore[union-attr]
    listed = await (await api.client.get("/v1/topics", headers=ADMIN)).json()
    assert listed["topics"][0]["p99_ms"] > 100

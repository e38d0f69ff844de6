"""The tenant quota's periodic division (worker.tenant_quota) between two workers, step by step,
on the in-memory board and config store; and the Redis demand board's round trip."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import redis.asyncio as aioredis

from adapters.memory_config import MemoryConfigStore
from adapters.memory_demand import MemoryDemandBoard
from adapters.redis_demand import RedisDemandBoard
from emq.core.demand import TopicLoad
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.naming import RedisKeys
from worker.groups import TopicState
from worker.tenant_quota import HOLD_S, TenantQuota

ON = Namespace.ONLINE


class _Group:
    def __init__(self) -> None:
        self.jobs = 100

    def buffered(self) -> int:
        return self.jobs


def _topics(owned: str) -> dict[TopicRef, TopicState]:
    out = {}
    for name in "abc":
        state = TopicState(Topic(TopicRef(ON, "acme", name), 200, 2))
        if name in owned:
            state.groups = {0: _Group(), 1: _Group()}  # type: ignore[dict-item]
        out[state.ref] = state
    return out


async def test_two_workers_divide_the_cap_and_rises_wait_for_the_hold() -> None:
    config, board = MemoryConfigStore(), MemoryDemandBoard()
    await config.create_tenant(Tenant("acme"))
    await config.update_tenant("acme", lambda t: dataclasses.replace(t, qps_caps={"online": 300}))
    changed: list[tuple[str, int | None]] = []

    def note(state: TopicState) -> None:
        changed.append((state.ref.topic, state.tenant_share))

    w1_topics, w2_topics = _topics("ab"), _topics("c")
    w1 = TenantQuota("w1", ON, config, w1_topics, note, board=board)
    w2 = TenantQuota("w2", ON, config, w2_topics, note, board=board)
    await w1.prime()
    a, c = w1_topics[TopicRef(ON, "acme", "a")], w2_topics[TopicRef(ON, "acme", "c")]
    assert w1.qps(a) == 100  # before any division: cap * weight / all weights
    for t in (0.0, 0.25):
        await w1.step(t)
        await w2.step(t)
    assert (a.tenant_share, c.tenant_share) == (100, 100)

    for g in c.groups.values():
        g.jobs = 0  # type: ignore[attr-defined]
    await w2.step(1.0)  # c drained: its share falls at once
    await w1.step(1.0)
    assert c.tenant_share == 2
    assert a.tenant_share == 100  # a rise waits until every owner has seen the division
    await w1.step(1.0 + HOLD_S / 2)
    assert a.tenant_share == 100
    await w2.step(1.0 + HOLD_S + 0.01)
    await w1.step(1.0 + HOLD_S + 0.01)
    assert a.tenant_share == 149 and w1.qps(a) == 149

    await config.update_tenant("acme", lambda t: dataclasses.replace(t, qps_caps={}))
    await w1.step(3.0)
    assert a.tenant_share is None and w1.qps(a) == 200  # uncapped: the topic's own quota


async def test_the_redis_board_round_trip(redis_url: str, test_id: str) -> None:
    client: Any = aioredis.Redis.from_url(redis_url)
    board = RedisDemandBoard(client, RedisKeys(test_id), owns_client=True)
    try:
        mine = {"acme": {"a": TopicLoad(True, 12.5)}}
        assert await board.exchange(ON, "w1", mine, 1.0) == {"acme": [mine["acme"]]}
        theirs = {"acme": {"b": TopicLoad(False, 3.0)}}
        seen = await board.exchange(ON, "w2", theirs, 1.0)
        assert sorted(seen["acme"], key=str) == sorted([mine["acme"], theirs["acme"]], key=str)
        key = RedisKeys(test_id).tenant_demand(ON, "acme")
        old = b'{"t": %f, "l": {"z": [1, 9]}}' % (time.time() - 60)
        await client.hset(key, "gone", old)
        seen = await board.exchange(ON, "w1", mine, 1.0)
        assert len(seen["acme"]) == 2  # the old post is ignored, and deleted
        assert await client.hexists(key, "gone") == 0
    finally:
        await board.aclose()


def test_the_shares_are_scraped_for_capped_topics_only() -> None:
    from worker.metrics import TopicCollector

    collector = TopicCollector()
    capped, free = (TopicState(Topic(TopicRef(ON, "acme", n), 200, 2)) for n in ("a", "b"))
    capped.tenant_share = 149
    collector.topics = {capped.ref: capped, free.ref: free}
    (family,) = (m for m in collector.collect() if m.name == "emq_topic_tenant_share_qps")
    assert [(s.labels["topic"], s.value) for s in family.samples] == [("a", 149.0)]

"""The attempt log and the search indexes on a real Redis: attempts read back in order, the
byte budget drops the oldest slices first and bounds the memory the attempts take (measured
with Redis's own ``MEMORY USAGE`` of their hashes), and a search pages through a topic's jobs
by state."""

from __future__ import annotations

import time

import orjson
import redis.asyncio as aioredis

from adapters.redis_attempts import add_writes, slice_s
from adapters.redis_jobs import RedisJobStore
from emq.core.attempts import Attempt, IndexWrite, Search
from emq.core.interfaces import PushResult
from emq.core.jobs import JobRecord
from emq.core.naming import RedisKeys
from worker.attempt_log import encode_attempt

TTL_S = 80  # slices of 10 s


def _attempt(n: int, at_ms: int, excerpt: int = 0) -> bytes:
    meta = (None, b"application/json", b"17", b"x" * excerpt if excerpt else None)
    return encode_attempt(n, at_ms, PushResult(200 if n > 1 else 500, 0.01, meta=meta), None)


async def test_attempts_read_back_and_the_budget_drops_the_oldest_first(
    redis_client: aioredis.Redis, test_id: str
) -> None:
    keys = RedisKeys(test_id)
    store = RedisJobStore(redis_client, keys, ttl_s=TTL_S, attempt_budget_bytes=10**9)
    attempts = store.attempt_store
    now = time.time()
    span = slice_s(TTL_S)
    # 3 slices of 2000 attempts each (1 KiB excerpts), the oldest first.
    for k, at in enumerate((now - 2 * span, now - span, now)):
        pipe = redis_client.pipeline(transaction=False)
        writes = [(f"msg_{k}_{i:05d}", 1, _attempt(1, int(at * 1000), 1024)) for i in range(2000)]
        add_writes(pipe, keys, TTL_S, at, writes, [], [])
        await pipe.execute()
    counted = sum(int(v) for v in (await redis_client.hgetall(keys.attempt_bytes())).values())
    used = 0
    for bucket in range(int(now // span) - 3, int(now // span) + 1):
        for shard in range(16):
            used += await redis_client.memory_usage(keys.attempts(bucket, shard)) or 0
    assert 0.9 * counted <= used <= 1.25 * counted  # the budget counts what Redis holds
    assert [a.n for a in await attempts.attempts("msg_0_00007")] == [1]

    dropped = await attempts.trim(budget_bytes=int(counted * 0.7))  # room for 2 of 3 slices
    assert 0.3 * counted <= dropped <= 0.35 * counted
    assert await attempts.attempts("msg_0_00007") == []  # the oldest slice went first
    kept = await attempts.attempts("msg_2_00007")
    assert kept == [Attempt(1, kept[0].start_ms, 10, 500, "http", None, kept[0].headers,
                            "x" * 1024)]  # fmt: skip
    assert kept[0].headers == {"content-type": "application/json", "content-length": "17"}


async def test_a_search_pages_by_state_newest_first(
    redis_client: aioredis.Redis, test_id: str
) -> None:
    keys = RedisKeys(test_id)
    store = RedisJobStore(redis_client, keys, ttl_s=600)
    now_ms = int(time.time() * 1000)
    topic = "online/acme/t"
    records: list[tuple[str, bytes]] = []
    index: list[IndexWrite] = []
    for i in range(7):
        state = "dead" if i % 2 else "delivered"
        job_id = f"msg_{i}"
        record = JobRecord(job_id, state, now_ms - 1000 * (7 - i), 1, 500, "HTTP 500")
        records.append((job_id, record_json(record)))
        index.append((topic, job_id, state, record.at_ms, "k" if i < 3 else None, None))
    await store.record(records, [], index)
    seen: list[str] = []
    after = None
    while True:
        found, more = await store.attempt_store.search(topic, Search("dead", limit=2, after=after))
        seen += [f.job_id for f in found]
        if not more or not found:
            break
        after = (found[-1].at_ms, found[-1].job_id)
    assert seen == ["msg_5", "msg_3", "msg_1"]
    keyed, _ = await store.attempt_store.search(topic, Search(key="k"))
    assert [f.job_id for f in keyed] == ["msg_2", "msg_1", "msg_0"]
    assert await store.attempt_store.belongs(topic, "msg_3")
    assert not await store.attempt_store.belongs("online/acme/other", "msg_3")


def record_json(record: JobRecord) -> bytes:
    return orjson.dumps(record.to_dict())

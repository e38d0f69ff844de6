"""Data at rest: a real worker removes delivered entries from Redis within a bounded time, for a
quiet queue as for a busy one, and never an entry it has not finished (issue 11, item 8).

The bound is ``checkpoint_interval_s + trim_interval_s`` after the entry and every entry before
it in its queue are finished; these tests run with a 1 s trim interval (1 s checkpoints) and
allow three times the bound for a loaded test machine.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import redis.asyncio as aioredis

from emq.core.model import GroupRef, Priority, TopicRef
from emq.core.naming import RedisKeys
from tests.worker.conftest import Sink, Stack, fast_retry

TRIM_ENV = {"EMQ_WORKER_TRIM_INTERVAL_S": "1"}
BOUND_S = 3 * (1.0 + 1.0)


def jobs(sink: Sink, path: str, n: int) -> list[dict[str, Any]]:
    return [
        {"url": sink.url(path), "body": {"n": i}, "headers": {"Authorization": "Bearer s3cret"}}
        for i in range(n)
    ]


def streams(keys: RedisKeys, ref: TopicRef, groups: int) -> list[str]:
    return [keys.stream(GroupRef(ref, i).queue(p)) for i in range(groups) for p in Priority]


async def entries(client: aioredis.Redis, names: list[str]) -> int:
    return sum([await client.xlen(n) for n in names])


async def wait_until_empty(client: aioredis.Redis, names: list[str], timeout_s: float) -> float:
    """Seconds until every stream in ``names`` holds no entry (or the timeout, then it fails)."""
    start = time.monotonic()
    while await entries(client, names) and time.monotonic() - start < timeout_s:
        await asyncio.sleep(0.05)
    assert await entries(client, names) == 0, f"entries left after {timeout_s} s"
    return time.monotonic() - start


async def test_a_quiet_topic_loses_its_delivered_entries_within_the_bound(
    stack: Stack, sink: Sink, worker_process: Any, redis_client: aioredis.Redis
) -> None:
    ref = await stack.topic("quiet", 100)
    keys = RedisKeys(stack.settings.redis_key_prefix)
    names = streams(keys, ref, stack.topics["quiet"].groups)
    await stack.enqueue("quiet", jobs(sink, "quiet", 50))
    assert await entries(redis_client, names) == 50
    worker = worker_process(**TRIM_ENV)
    assert await sink.wait_for(lambda: len(sink.of("quiet")) == 50, 15), worker.log()
    await wait_until_empty(redis_client, names, BOUND_S)  # no traffic since: the timer trims


async def test_a_worker_trims_what_it_delivered_when_it_stops(
    stack: Stack, sink: Sink, worker_process: Any, redis_client: aioredis.Redis
) -> None:
    ref = await stack.topic("stop", 100)
    names = streams(RedisKeys(stack.settings.redis_key_prefix), ref, 1)
    await stack.enqueue("stop", jobs(sink, "stop", 50))
    worker = worker_process(EMQ_WORKER_TRIM_INTERVAL_S="600")  # the timer never fires
    assert await sink.wait_for(lambda: len(sink.of("stop")) == 50, 15), worker.log()
    assert worker.stop() == 0, worker.log()  # SIGTERM: final checkpoint, then the final trim
    assert await entries(redis_client, names) == 0, worker.log()


async def test_the_next_owner_trims_what_a_killed_worker_left(
    stack: Stack, sink: Sink, worker_process: Any, redis_client: aioredis.Redis
) -> None:
    ref = await stack.topic("left", 100)  # one group
    keys = RedisKeys(stack.settings.redis_key_prefix)
    queue = GroupRef(ref, 0).queue(Priority.MEDIUM)
    await stack.enqueue("left", jobs(sink, "left", 50))
    last = (await redis_client.xrevrange(keys.stream(queue), count=1))[0][0]
    first = worker_process("w1", EMQ_WORKER_TRIM_INTERVAL_S="600")
    assert await sink.wait_for(lambda: len(sink.of("left")) == 50, 15), first.log()
    deadline = time.monotonic() + 10  # the checkpoint follows within its 1 s interval
    while await redis_client.hget(keys.checkpoint(queue), "o") != last:
        assert time.monotonic() < deadline, first.log()
        await asyncio.sleep(0.05)
    first.kill()  # checkpointed, never trimmed
    assert await redis_client.xlen(keys.stream(queue)) == 50
    second = worker_process("w2", **TRIM_ENV)
    await wait_until_empty(redis_client, [keys.stream(queue)], 5 + BOUND_S)
    assert len(sink.of("left")) == 50, second.log()  # nothing was delivered again


async def test_a_busy_topic_keeps_only_what_is_not_yet_delivered(
    stack: Stack, sink: Sink, worker_process: Any, redis_client: aioredis.Redis
) -> None:
    ref = await stack.topic("busy", 150)  # one group
    queue = GroupRef(ref, 0).queue(Priority.MEDIUM)
    keys = RedisKeys(stack.settings.redis_key_prefix)
    stream, checkpoint = keys.stream(queue), keys.checkpoint(queue)
    worker = worker_process(**TRIM_ENV)
    commits: list[tuple[float, bytes]] = []  # (when seen, committed offset)
    checked = sent = 0
    end = time.monotonic() + 30
    while checked < 5 and time.monotonic() < end:  # ~150 jobs/s offered at 150 QPS: busy
        sent += len(await stack.enqueue("busy", jobs(sink, "busy", 30)))
        committed = await redis_client.hget(checkpoint, "o")
        now = time.monotonic()
        if committed is not None:
            commits.append((now, committed))
        while commits and commits[0][0] <= now - BOUND_S:  # committed a bound ago: gone now
            _, old = commits.pop(0)
            assert await redis_client.xrange(stream, "-", old, count=1) == [], worker.log()
            checked += 1
        await asyncio.sleep(0.2)
    assert checked >= 5, worker.log()
    assert await sink.wait_for(lambda: len(sink.of("busy")) == sent, 30), worker.log()
    await wait_until_empty(redis_client, [stream], BOUND_S)


async def test_entries_above_the_checkpoint_survive_a_retry_in_the_middle(
    stack: Stack, sink: Sink, worker_process: Any, redis_client: aioredis.Redis
) -> None:
    ref = await stack.topic("mid", 10, retry=fast_retry(3, 3.0))  # 1 group, 10 jobs/s
    keys = RedisKeys(stack.settings.redis_key_prefix)
    group = GroupRef(ref, 0)
    stream, delayed = keys.stream(group.queue(Priority.MEDIUM)), keys.delayed(group)
    batch = jobs(sink, "mid", 40)
    batch[5]["url"] = sink.url("mid-fails")  # fails once, then waits 3 s in the delayed set
    sink.behaviour["mid-fails"].status = 500
    ids = await stack.enqueue("mid", batch)
    offsets = [e[0] for e in await redis_client.xrange(stream)]
    worker = worker_process(**TRIM_ENV)
    passed_the_retry = False
    deadline = time.monotonic() + 30
    while len(sink.deliveries) < 40 and time.monotonic() < deadline:
        snapshot = await snapshot_ids(redis_client, stream, delayed)
        delivered = {d.job_id for d in sink.deliveries}
        undelivered = set(ids) - delivered
        assert undelivered <= snapshot.stored, (undelivered - snapshot.stored, worker.log())
        if (
            ids[5] in undelivered
            and snapshot.first is not None
            and snapshot.first > entry_id(offsets[5])
        ):
            passed_the_retry = True  # trimmed past the job in retry: it waits in the delayed set
        if sink.attempts[ids[5]] >= 1:
            sink.behaviour["mid-fails"].status = 200
        await asyncio.sleep(0.1)
    assert passed_the_retry, worker.log()
    assert {d.job_id for d in sink.deliveries} == set(ids)
    await wait_until_empty(redis_client, [stream], BOUND_S)
    assert await redis_client.zcard(delayed) == 0


class Snapshot:
    def __init__(self, stored: set[str], first: tuple[int, int]) -> None:
        self.stored = stored  # job ids in the stream or the delayed set
        self.first = first  # the oldest stream entry's id ((0, 0): the stream is empty)


async def snapshot_ids(client: aioredis.Redis, stream: str, delayed: str) -> Snapshot:
    """The jobs stored in ``stream`` and ``delayed`` at one instant (a MULTI reads both)."""
    async with client.pipeline(transaction=True) as pipe:
        pipe.xrange(stream)
        pipe.zrange(delayed, 0, -1)
        in_stream, in_delayed = await pipe.execute()
    stored = {json.loads(fields[b"d"])["id"] for _, fields in in_stream}
    stored |= {json.loads(m.split(b"|", 1)[1])["id"] for m in in_delayed}
    return Snapshot(stored, entry_id(in_stream[0][0]) if in_stream else (0, 0))


def entry_id(raw: bytes) -> tuple[int, int]:
    ms, seq = raw.split(b"-")
    return int(ms), int(seq)

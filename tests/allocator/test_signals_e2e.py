"""Hints addressed to owners end to end: an enqueuer with the API's route table, two real
``emq worker`` fleet processes, real ZooKeeper, Redis and an HTTP sink.

Jobs (immediate and delayed) reach the sink while the signals travel through the workers'
inboxes, and again after one worker leaves and the other takes its groups over.
"""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio as aioredis

from emq.api.enqueue import Enqueuer
from emq.compose import open_queues, open_signal_routes
from emq.core.model import Namespace, TopicRef
from emq.core.naming import RedisKeys
from emq.core.settings import Settings
from emq.rigs.sink import Sink
from tests.allocator.conftest import eventually
from tests.worker.conftest import Stack, sink, stack, worker_process

__all__ = ["sink", "stack", "worker_process"]  # fixtures used from the worker harness

FLEET_ENV = {"EMQ_ZK_SESSION_TIMEOUT_S": "1.5"}


def batch(sink: Sink, topic: str, tag: str) -> list[dict[str, Any]]:
    now = [{"url": sink.url(topic), "body": {"n": i, "t": tag}} for i in range(10)]
    later = [{"url": sink.url(topic), "body": {"d": i, "t": tag}, "delay_s": 1} for i in range(3)]
    return now + later


async def test_jobs_arrive_through_the_owners_inboxes_and_after_a_leave(
    stack: Stack, sink: Sink, worker_process: Any, settings: Settings
) -> None:
    names = [f"s{i}" for i in range(6)]
    refs = [await stack.topic(n, 50) for n in names]
    groups = [str(TopicRef(Namespace.ONLINE, "acme", n).group(0)) for n in names]
    routes, watch = open_signal_routes(settings)
    assert watch is not None
    queues = await open_queues(settings, routes)
    enqueuer = Enqueuer(stack.config, queues)
    raw = aioredis.Redis.from_url(settings.redis_url)
    workers = [worker_process(f"w{i}", standalone=False, **FLEET_ENV) for i in range(2)]

    def delivered() -> set[str]:
        return {d.job_id for n in names for d in sink.of(n)}

    async def enqueue(tag: str) -> set[str]:
        ids: set[str] = set()
        for n, ref in zip(names, refs, strict=True):
            ids |= set((await enqueuer.enqueue(ref, batch(sink, n, tag), batch=True)).ids)
        return ids

    try:
        owners = lambda: {routes.owner(g) for g in groups}  # noqa: E731
        await eventually(lambda: owners() == {"w0", "w1"}, 30)
        ids = await enqueue("first")
        assert await sink.wait_for(lambda: ids <= delivered(), 20), workers[0].log()
        keys = RedisKeys(settings.redis_key_prefix)
        assert await raw.xlen(keys.inbox("w0")) > 0 and await raw.xlen(keys.inbox("w1")) > 0
        started = time.monotonic()
        workers[1].stop()
        await eventually(lambda: owners() == {"w0"}, 20)
        ids = await enqueue("second")
        assert await sink.wait_for(lambda: ids <= delivered(), 20), workers[0].log()
        print(f"after the leave: delivered {time.monotonic() - started:.1f} s after the stop")
    finally:
        await raw.aclose()
        await queues.aclose()
        await watch.aclose()

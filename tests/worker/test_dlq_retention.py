"""A worker keeps its topics' DLQ retention: the letters it adds trim the DLQ to
``dlq_max_entries``, and its slow timer ages out a DLQ that gets no new letters (issue 12)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from emq.api.enqueue import Enqueuer
from emq.core.interfaces import Pusher, PushRequest, PushResult
from emq.core.model import GroupRef, Namespace, Tenant, Topic, TopicRef
from tests.worker.conftest import fast_retry, worker_in_loop


class _Refusing(Pusher):
    """Every push is answered 400: dead-lettered at once."""

    def __init__(self) -> None:
        self.pushed = 0

    async def push(self, request: PushRequest) -> PushResult:
        self.pushed += 1
        return PushResult(400, 0.001)

    async def aclose(self) -> None:
        return None


class _Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def _until(
    condition: Callable[[], bool], running: asyncio.Future[None], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        assert not running.done(), running
        await asyncio.sleep(0.02)
    assert condition(), "condition not met in time"


async def test_a_worker_trims_dead_letters_to_its_topics_retention() -> None:
    clock = _Clock()
    queues, config = MemoryQueueBackend(clock=clock), MemoryConfigStore()
    ref = TopicRef(Namespace.ONLINE, "acme", "t")
    await config.create_tenant(Tenant("acme", "", "0" * 64, 0.0))
    topic = Topic(ref, 100, 1, retry=fast_retry(1, 0.05), dlq_max_entries=3, dlq_max_age_s=3600)
    await config.create_topic(topic)
    jobs = [{"url": f"https://example.com/{i}"} for i in range(5)]
    await Enqueuer(config, queues).enqueue(ref, jobs, batch=True)
    pusher = _Refusing()
    options = {"senders": 4, "senders_min": 4, "dlq_trim_interval_s": 0.05}
    async with worker_in_loop(config, queues, pusher, **options) as running:
        group = GroupRef(ref, 0)
        dlq = queues._dlq  # behind the interface: every letter ever added, trimmed or not
        await _until(lambda: group in dlq and dlq[group].added == 5, running, 10)
        assert pusher.pushed == 5
        assert len(await queues.list_dead(group, None, 100)) == 3  # the newest 3 of 5
        clock.now += 3601  # no new letter comes: the worker's timer ages the quiet DLQ out
        await _until(lambda: not dlq[group].offsets, running, 10)
    # (the block's end stopped it cleanly: no task died)

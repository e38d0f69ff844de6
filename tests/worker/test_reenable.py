"""A re-enabled endpoint's jobs (worker.reenable): which marks release anything, and a worker
whose endpoint was disabled delivering the jobs it deferred at once when re-enabled."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from emq.api.enqueue import Enqueuer
from emq.core.endpoints import EndpointPolicy
from emq.core.interfaces import Pusher, PushRequest, PushResult
from emq.core.model import Namespace, RetryPolicy, Tenant, Topic, TopicRef
from tests.worker.conftest import worker_in_loop
from worker import endpoints
from worker.reenable import new_marks
from worker.runtime import Worker


def test_only_marks_new_in_the_policy_release_anything() -> None:
    old = EndpointPolicy(disable_after=3).enabled("a:80", 1_000)
    assert new_marks(old, old) == []
    new = old.enabled("b:443", 2_000).enabled("*", 2_001)
    assert new_marks(old, new) == ["*", "b:443"]
    assert new_marks(old, old.enabled("a:80", 3_000)) == ["a:80"]  # marked again, later


class _Down(Pusher):
    """Answers 500 until ``up``; records the ids it answered 200."""

    def __init__(self) -> None:
        self.up = False
        self.delivered: set[str] = set()

    async def push(self, request: PushRequest) -> PushResult:
        if not self.up:
            return PushResult(500, 0.001)
        self.delivered.add(request.url)
        return PushResult(200, 0.001)

    async def aclose(self) -> None:
        return None


async def test_a_re_enable_brings_back_the_jobs_deferred_while_disabled_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A park of 5 jobs: the rest of the backlog goes to the delayed set for a minute.
    monkeypatch.setattr(endpoints, "PARK_MIN", 5)
    monkeypatch.setattr(endpoints, "PARK_S", 0.0)
    queues, config = MemoryQueueBackend(), MemoryConfigStore()
    ref = TopicRef(Namespace.ONLINE, "acme", "down")
    policy = EndpointPolicy(disable_after=2, disable_after_s=0)
    await config.create_tenant(Tenant("acme", "", "0" * 64, 0.0))
    await config.create_topic(
        Topic(ref, 50, 1, retry=RetryPolicy(30, 0.05, 1.0, 0.0), endpoints=policy)
    )
    urls = [f"http://down.example/{i}" for i in range(40)]
    await Enqueuer(config, queues).enqueue(ref, [{"url": u} for u in urls], batch=True)
    pusher = _Down()
    made: list[Worker] = []
    async with worker_in_loop(config, queues, pusher, made):
        deadline = time.monotonic() + 10
        while not (await queues.delayed([ref.group(0)]))[0] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        rates = made[0].topics[ref].rates
        assert rates is not None and rates.endpoints["down.example:80"].disabled
        deferred = (await queues.delayed([ref.group(0)]))[0]
        assert deferred > 0  # past the 5 parked: due a minute later
        pusher.up = True
        mark = policy.enabled("down.example:80", int(time.time() * 1000))
        await config.update_topic(ref, lambda t: replace(t, endpoints=mark))
        deadline = time.monotonic() + 10
        while len(pusher.delivered) < len(urls) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    assert pusher.delivered == set(urls)  # all of them within seconds, not a minute

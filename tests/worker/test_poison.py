"""A worker never dies of a job (invariant 8), on real Redis, ZooKeeper, HTTP and a real process.

Poison jobs that bypassed the API's validation (written straight into the queue backend) end in
the DLQ with the reason, while healthy jobs of the same topic and of another keep being
delivered and the worker process stays up.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from emq.api.enqueue import Enqueuer
from emq.core.interfaces import Pusher, PushRequest, PushResult, PutItem
from emq.core.model import (
    Envelope,
    GroupRef,
    Job,
    Namespace,
    Priority,
    Tenant,
    Topic,
    TopicRef,
    new_job_id,
)
from tests.worker.conftest import Sink, Stack, fast_retry, worker_in_loop


def _poison(sink: Sink) -> dict[bytes, str]:
    """Stored jobs the API would refuse, each with (part of) the reason it is dead-lettered for."""
    now = int(time.time() * 1000)

    def env(job: Job) -> bytes:
        return Envelope(new_job_id(now), job, now).encode()

    return {
        env(Job("http://xn--zz/hook")): "undeliverable: url: is not a valid URL",  # IDNA fails
        env(Job("http://\u00ad/hook")): "invisible format characters",  # soft hyphen as host
        env(Job(sink.url("poison"), headers={"X-Poison": "a\x0bb"})): "control character",
        env(Job("http://nothing-here.invalid/hook")): "cannot resolve",  # resolves to nothing
        b"this is not an envelope": "unreadable job",
        b'{"id":"msg_s","t":0,"job":{"url":"http://x.y/","body":"\\ud800"}}': "unreadable job",
    }


async def _put_raw(stack: Stack, ref: TopicRef, payloads: list[bytes]) -> None:
    queue = GroupRef(ref, 0).queue(Priority.MEDIUM)
    await stack.queues.put([PutItem(queue, f"raw{i}", p) for i, p in enumerate(payloads)])


def _job_id(payload: bytes) -> bytes:
    """The job id in a stored payload (a retry re-encodes it), or the payload if it has none."""
    found = re.search(rb'"id":"([^"]+)"', payload)
    return found.group(1) if found else payload


def _jobs(sink: Sink, topic: str, n: int) -> list[dict[str, Any]]:
    return [{"url": sink.url(topic), "body": {"n": i}} for i in range(n)]


async def test_poison_jobs_are_dead_lettered_and_the_worker_keeps_delivering(
    stack: Stack, sink: Sink, worker_process: Any
) -> None:
    ref = await stack.topic("poison", 100, retry=fast_retry(2, 0.2))
    await stack.topic("other", 100)
    poison = _poison(sink)
    ids = set(await stack.enqueue("poison", _jobs(sink, "poison", 20)))
    await _put_raw(stack, ref, list(poison))
    ids |= set(await stack.enqueue("poison", _jobs(sink, "poison", 20)))
    ids |= set(await stack.enqueue("other", _jobs(sink, "other", 40)))
    worker = worker_process()
    group = GroupRef(ref, 0)

    async def dead() -> int:
        return len(await stack.queues.list_dead(group, None, 100))

    deadline = time.monotonic() + 20
    while await dead() < len(poison) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert await sink.wait_for(lambda: {d.job_id for d in sink.deliveries} >= ids, 10)
    letters = await stack.queues.list_dead(group, None, 100)
    assert len(letters) == len(poison), [letter.error for letter in letters]
    by_id = {_job_id(letter.payload): letter for letter in letters}
    for payload, reason in poison.items():
        letter = by_id[_job_id(payload)]
        assert reason in letter.error, (reason, letter.error)
        # A transport failure is retried, then dead-lettered; the rest could never succeed.
        assert letter.attempts == (2 if reason == "cannot resolve" else 1)
    assert worker.proc.poll() is None, worker.log()
    later = set(await stack.enqueue("poison", _jobs(sink, "poison", 10)))
    assert await sink.wait_for(lambda: {d.job_id for d in sink.deliveries} >= later, 10)
    assert worker.proc.poll() is None, worker.log()


class _Pusher(Pusher):
    """Delivers everything except URLs containing ``boom``, for which it raises (a bug)."""

    def __init__(self) -> None:
        self.delivered: list[str] = []
        self.raised = 0

    async def push(self, request: PushRequest) -> PushResult:
        if "boom" in request.url:
            self.raised += 1
            raise RuntimeError("boom")
        self.delivered.append(request.url)
        return PushResult(200, 0.001)

    async def aclose(self) -> None:
        return None


async def test_an_unexpected_exception_is_a_failed_attempt_then_a_dead_letter() -> None:
    queues, config = MemoryQueueBackend(), MemoryConfigStore()
    ref = TopicRef(Namespace.ONLINE, "acme", "t")
    await config.create_tenant(Tenant("acme", "", "0" * 64, 0.0))
    await config.create_topic(Topic(ref, 100, 1, retry=fast_retry(3, 0.05)))
    enqueuer = Enqueuer(config, queues)
    await enqueuer.enqueue(ref, [{"url": "https://example.com/boom"}], batch=False)
    await enqueuer.enqueue(
        ref, [{"url": f"https://example.com/{i}"} for i in range(20)], batch=True
    )
    pusher = _Pusher()
    async with worker_in_loop(config, queues, pusher, senders=4, senders_min=4) as running:
        group = GroupRef(ref, 0)
        deadline = time.monotonic() + 10
        while not await queues.list_dead(group, None, 10) and time.monotonic() < deadline:
            assert not running.done(), running
            await asyncio.sleep(0.02)
        (letter,) = await queues.list_dead(group, None, 10)
        assert letter.error == "RuntimeError: boom" and letter.attempts == 3
        assert pusher.raised == 3 and len(pusher.delivered) == 20
        await enqueuer.enqueue(ref, [{"url": "https://example.com/after"}], batch=False)
        while "https://example.com/after" not in pusher.delivered and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert "https://example.com/after" in pusher.delivered
    # (the block's end stopped it cleanly: no task died)

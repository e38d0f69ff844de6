"""A group handed over with jobs finished above its checkpoint: its next owner does not deliver
them again.

The checkpoint stops below the oldest unfinished entry. With keys, a later job of another key is
delivered while a key's next job is held behind its job in flight; the release forgets the held
one (its next owner delivers it), so without more the next owner would read from the checkpoint
and deliver every later job again: a duplicate with no crash (seen in ``emq bench promises``:
six keyed jobs delivered twice when a second worker joined). The release now removes the
entries it finished above the checkpoint (``QueueBackend.forget_finished``).

Two real :class:`~worker.runtime.Worker` s on the in-memory stores, one after the other, with
scripted assignments; pushes are recorded by job id. The same removal on Redis and Cluster is in
``tests/adapters/test_worker_ops_contract.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from emq.core.interfaces import Pusher, PushRequest, PushResult
from emq.core.interfaces.queues import PutItem
from emq.core.job import Envelope, Job
from emq.core.model import Namespace, Priority, Tenant, Topic, TopicRef
from tests.worker.scripted import Scripted
from worker.runtime import Worker
from worker.settings import WorkerSettings

TOPIC = TopicRef(Namespace.ONLINE, "t", "orders")
G0 = TOPIC.group(0)
QUEUE = G0.queue(Priority.MEDIUM)


class Recording(Pusher):
    """Answers 200; the job ids pushed, in order. A push of a job in ``hold`` waits for
    ``let_go`` (a slow endpoint)."""

    def __init__(self, pushes: list[str], hold: frozenset[str] = frozenset()) -> None:
        self.pushes = pushes
        self.hold = hold
        self.let_go = asyncio.Event()

    async def push(self, request: PushRequest) -> PushResult:
        job_id = request.url.rsplit("/", 1)[-1]
        self.pushes.append(job_id)
        if job_id in self.hold:
            await self.let_go.wait()
        return PushResult(200, 0.0)

    async def aclose(self) -> None:
        return None


async def until(what: Callable[[], object], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)  # (polls a condition; no ordering rests on it)


@asynccontextmanager
async def running(
    name: str, queues: MemoryQueueBackend, config: MemoryConfigStore, pusher: Recording
) -> AsyncIterator[tuple[asyncio.Event, Scripted]]:
    assignment = Scripted(config)
    settings = WorkerSettings(metrics_port="0", shutdown_grace_s=2.0)
    worker = Worker(name, Namespace.ONLINE, settings, queues=queues, config=config,
                    assignment=assignment, pusher=pusher)  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.ensure_future(worker.run(stop))
    try:
        yield stop, assignment
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def _put(queues: MemoryQueueBackend, jobs: list[tuple[str, str | None]]) -> None:
    items = []
    for job_id, key in jobs:
        job = Job(url=f"http://127.0.0.1:9/{job_id}", body="{}", key=key)
        envelope = Envelope(job_id, job, int(time.time() * 1000))
        items.append(PutItem(QUEUE, job_id, envelope.encode()))
    await queues.put(items)


@pytest.mark.parametrize("handover", ["assigned away", "stopped"])
async def test_jobs_finished_above_the_checkpoint_are_not_delivered_again_by_the_next_owner(
    handover: str,
) -> None:
    queues, config = MemoryQueueBackend(), MemoryConfigStore()
    await config.create_tenant(Tenant("t", "t", "0" * 64, time.time()))
    await config.create_topic(Topic(TOPIC, 100, 1))
    # a0 goes to a slow endpoint; a1 waits behind it (same key); the b jobs (other keys, and
    # one with none) go meanwhile: finished above a1, the oldest unfinished entry.
    jobs = [("a0", "a"), ("a1", "a"), *[(f"b{i}", f"b{i}") for i in range(5)], ("c0", None)]
    later = [f"b{i}" for i in range(5)] + ["c0"]
    await _put(queues, jobs)
    pushes: list[str] = []
    first = Recording(pushes, hold=frozenset({"a0"}))
    async with running("w1", queues, config, first) as (stop, assignment):
        await assignment.assign({G0: 1})
        await until(lambda: set(later) <= set(pushes))
        assert "a1" not in pushes  # held behind a0, in flight
        # Handed over (a release, or the worker's shutdown): a0 ends within the grace, a1 is
        # let go unsent.
        if handover == "stopped":
            stop.set()
        else:
            await assignment.assign({})
        await asyncio.sleep(0.05)
        first.let_go.set()
        await until(lambda: assignment.released)
    assert Counter(pushes) == Counter(["a0", *later])
    # What the store holds for the next owner: a1 only (a0 committed, the rest removed), and
    # the backlog says so.
    checkpoint = await queues.read_checkpoint(QUEUE)
    assert checkpoint is not None
    left = (await queues.read({QUEUE: checkpoint.offset}, 100))[QUEUE]
    assert [Envelope.decode(e.payload).id for e in left] == ["a1"]
    assert await queues.backlog([QUEUE]) == [1]

    second = Recording(pushes)
    async with running("w2", queues, config, second) as (_, assignment):
        await assignment.assign({G0: 2})
        await until(lambda: "a1" in pushes)
        await asyncio.sleep(0.2)  # (anything it would deliver again comes with a1's read)
    assert Counter(pushes) == Counter(job_id for job_id, _ in jobs)  # each exactly once

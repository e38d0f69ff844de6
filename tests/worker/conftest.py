"""Worker integration harness: real Redis and ZooKeeper, a real HTTP sink, real worker processes.

* ``sink`` is the one HTTP sink (:class:`emq.rigs.sink.Sink`) on loopback: it records every
  delivery (topic, job id, arrival time, headers, body) and can answer per topic with a
  status, a ``Retry-After``, a delay or a hang.
* :class:`Stack` creates topics in the real config store and enqueues through the real
  :class:`~emq.api.enqueue.Enqueuer`, exactly as the API does.
* :func:`worker_process` runs ``emq worker --standalone`` (or, with ``standalone=False``, a
  fleet member) as a subprocess (so it can be killed with SIGKILL and so its CPU is its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from capacity import group_count
from emq.api.enqueue import Enqueuer
from emq.compose import open_config, open_queues
from emq.core.interfaces import ConfigStore, Pusher, QueueBackend
from emq.core.model import Namespace, RetryPolicy, Tenant, Topic, TopicRef
from emq.core.settings import Settings
from emq.rigs.procs import Proc, stop_all
from emq.rigs.sink import Sink
from worker.groups import TopicStats
from worker.runtime import Worker
from worker.settings import WorkerSettings
from worker.standalone import StandaloneAssignment

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class LoopGaps:
    """Where this loop did not run: a ticker every ``tick_s``; a gap between two ticks longer
    than ``slack_s`` is time the loop (and a worker on it) lost to the machine, to another
    thread or to a collection. A test that judges a worker's pace over a short span takes it
    off the span, so a stall of the test process is not read as the worker's pace."""

    def __init__(self, tick_s: float = 0.005, slack_s: float = 0.02) -> None:
        self.tick_s, self.slack_s = tick_s, slack_s
        self.gaps: list[tuple[float, float]] = []  # (last tick, next tick), wall clock
        self._ticking: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.time()
        while True:
            await asyncio.sleep(self.tick_s)
            now = time.time()
            if now - last > self.slack_s:
                self.gaps.append((last + self.tick_s, now))
            last = now

    def lost(self, start: float, end: float) -> float:
        """Seconds of ``[start, end)`` the loop did not run."""
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in self.gaps)

    async def __aenter__(self) -> LoopGaps:
        self._ticking = asyncio.ensure_future(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._ticking is not None
        self._ticking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._ticking


@contextlib.asynccontextmanager
async def worker_in_loop(
    config: ConfigStore,
    queues: QueueBackend,
    pusher: Pusher,
    made: list[Worker] | None = None,
    **settings: Any,
) -> AsyncIterator[asyncio.Future[None]]:
    """A standalone :class:`~worker.runtime.Worker` on this loop (the in-memory backends of a
    fast test, a pusher of the test's own), running until the block ends; the block gets its
    task (done early: it died) and the stop must be clean (no task died). ``made``, if given,
    gets the worker (to read its state)."""
    assignment = StandaloneAssignment(config, Namespace.ONLINE)
    options = {"metrics_port": 0, "shutdown_grace_s": 1} | settings
    worker = Worker("w", Namespace.ONLINE, WorkerSettings(**options), queues=queues,
                    config=config, assignment=assignment, pusher=pusher)  # fmt: skip
    if made is not None:
        made.append(worker)
    stop = asyncio.Event()
    following = asyncio.ensure_future(assignment.run())
    running = asyncio.ensure_future(worker.run(stop))
    try:
        yield running
    finally:
        stop.set()
        try:
            await asyncio.wait_for(running, 10)
        finally:
            following.cancel()


async def push_backlog(
    name: str,
    qps: int,
    jobs: int,
    pusher: Pusher,
    pushed: Callable[[], int],
    made: list[Worker] | None = None,
    **settings: Any,
) -> TopicStats:
    """A topic ``name`` of one group at ``qps`` on the in-memory backends, ``jobs`` jobs to a far
    host enqueued at once, and a worker in this loop pushing them through ``pusher`` until
    ``pushed()`` (what the pusher counts) reaches ``jobs`` (20 s at most); the topic's stats in
    the worker (``made``, if given, gets the worker)."""
    queues, config = MemoryQueueBackend(), MemoryConfigStore()
    ref = TopicRef(Namespace.ONLINE, "acme", name)
    await config.create_tenant(Tenant("acme", "", "0" * 64, 0.0))
    await config.create_topic(Topic(ref, qps, 1))
    items = [{"url": f"https://far.example/{i}"} for i in range(jobs)]
    await Enqueuer(config, queues).enqueue(ref, items, batch=True)
    made = [] if made is None else made
    async with worker_in_loop(config, queues, pusher, made, **settings) as running:
        deadline = time.monotonic() + 20
        while pushed() < jobs and time.monotonic() < deadline:
            assert not running.done(), running
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # (a duplicate would show by now)
    return made[-1].topics[ref].stats


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    async with Sink().serving() as s:
        yield s


@dataclass
class Stack:
    settings: Settings
    queues: QueueBackend
    config: ConfigStore
    enqueuer: Enqueuer
    tenant: str = "acme"
    topics: dict[str, Topic] = field(default_factory=dict)

    async def topic(self, name: str, qps: int, **extra: Any) -> TopicRef:
        ref = TopicRef(Namespace.ONLINE, self.tenant, name)
        topic = Topic(ref, qps, group_count(qps), secret=SECRET, **extra)
        await self.config.create_topic(topic)
        self.topics[name] = topic
        return ref

    async def enqueue(self, name: str, jobs: list[dict[str, Any]]) -> list[str]:
        ref = TopicRef(Namespace.ONLINE, self.tenant, name)
        ids: list[str] = []
        for i in range(0, len(jobs), 1000):
            ids += (await self.enqueuer.enqueue(ref, jobs[i : i + 1000], batch=True)).ids
        return ids

    async def update(self, name: str, **changes: Any) -> None:
        ref = TopicRef(Namespace.ONLINE, self.tenant, name)
        await self.config.update_topic(ref, lambda t: replace(t, **changes))


@pytest.fixture
async def stack(settings: Settings) -> AsyncIterator[Stack]:
    queues = await open_queues(settings)
    config = await open_config(settings)
    await config.create_tenant(Tenant("acme", "Acme", "0" * 64, time.time()))
    yield Stack(settings, queues, config, Enqueuer(config, queues))
    await config.aclose()
    await queues.aclose()


def fast_retry(attempts: int = 3, base_s: float = 0.2) -> RetryPolicy:
    return RetryPolicy(max_attempts=attempts, base_delay_s=base_s, multiplier=2.0, jitter=0.0)


class WorkerProcess(Proc):
    """``emq worker`` (standalone, or a fleet member) with the tests' settings, not started."""

    def __init__(
        self,
        settings: Settings,
        log_path: Path,
        worker_id: str,
        *,
        standalone: bool = True,
        **env: str,
    ) -> None:
        self.worker_id = worker_id
        self.standalone = standalone  # False: join the fleet through ZooKeeper
        environment = (
            {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
            | {
                "EMQ_REDIS_URL": settings.redis_url,
                "EMQ_ZK_HOSTS": settings.zk_hosts,
                "EMQ_REDIS_KEY_PREFIX": settings.redis_key_prefix,
                "EMQ_PUSH_ALLOW_CIDRS": "127.0.0.0/8",
                "EMQ_WORKER_METRICS_PORT": "0",
                "EMQ_WORKER_HISTORY_INTERVAL_S": "1",
                "EMQ_WORKER_REQUEST_TIMEOUT_S": "2",
                "EMQ_WORKER_SHUTDOWN_GRACE_S": "3",
                "EMQ_LOG_LEVEL": "INFO",
            }
            | env
        )
        argv = ["worker", "--id", worker_id] + (["--standalone"] if standalone else [])
        super().__init__(worker_id, argv, environment, log_path, start=False)

    def stop(self, timeout_s: float = 20) -> int | None:
        return super().stop(timeout_s)

    def log(self, chars: int = 5000) -> str:
        return super().log(chars)


@pytest.fixture
def worker_process(settings: Settings, tmp_path: Path) -> Iterator[Any]:
    started: list[WorkerProcess] = []

    def make(worker_id: str = "w1", standalone: bool = True, **env: str) -> WorkerProcess:
        log_path = tmp_path / f"{worker_id}.log"
        w = WorkerProcess(settings, log_path, worker_id, standalone=standalone, **env)
        w.start()
        started.append(w)
        return w

    yield make
    # All asked to stop at once, then waited for: each may take its shutdown grace, and one after
    # the other that was 3-4 s per worker of a fleet test's teardown.
    stop_all(started, timeout_s=20, hurry=True)  # (a second signal: no draining, see stop_all)


def full_seconds(per_second: dict[int, int]) -> list[int]:
    """Counts of the complete seconds (the first and last are partial)."""
    seconds = sorted(per_second)
    return [per_second[s] for s in seconds[1:-1]]

"""Worker integration harness: real Redis and ZooKeeper, a real HTTP sink, real worker processes.

* :class:`Sink` is an aiohttp server on loopback that records every delivery (topic, job id,
  arrival time, headers, body) and can answer per topic with a status, a ``Retry-After``, a
  delay or a hang.
* :class:`Stack` creates topics in the real config store and enqueues through the real
  :class:`~emq.api.enqueue.Enqueuer`, exactly as the API does.
* :func:`worker_process` runs ``emq worker --standalone`` (or, with ``standalone=False``, a
  fleet member) as a subprocess (so it can be killed with SIGKILL and so its CPU is its own).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from capacity import group_count
from emq.api.enqueue import Enqueuer
from emq.compose import open_config, open_queues
from emq.core.interfaces import ConfigStore, QueueBackend
from emq.core.model import Namespace, RetryPolicy, Tenant, Topic, TopicRef
from emq.core.settings import Settings

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@dataclass
class Delivery:
    topic: str
    job_id: str
    at: float
    headers: dict[str, str]
    body: bytes


@dataclass
class Behaviour:
    status: int = 200
    retry_after: str | None = None
    delay_s: float = 0.0
    hang: bool = False
    fail_first: int = 0  # answer 500 to this many requests first
    jitter_s: float = 0.0  # and wait a random time up to this (requests overtake each other)


class Sink:
    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.attempts: Counter[str] = Counter()
        self.first_attempt_at: dict[str, float] = {}
        self.behaviour: dict[str, Behaviour] = defaultdict(Behaviour)
        self.base = ""
        self._hung: list[asyncio.Future[None]] = []
        self.hanging_now = 0
        self.max_hanging = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        topic = request.match_info["topic"]
        body = await request.read()
        job_id = request.headers.get("webhook-id", "")
        self.attempts[job_id] += 1
        b = self.behaviour[topic]
        if b.hang:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._hung.append(fut)
            self.hanging_now += 1
            self.max_hanging = max(self.max_hanging, self.hanging_now)
            try:
                await fut
            finally:
                self.hanging_now -= 1
        self.first_attempt_at.setdefault(job_id, time.time())
        if b.delay_s or b.jitter_s:
            await asyncio.sleep(b.delay_s + random.uniform(0, b.jitter_s))
        if b.fail_first > 0:
            b.fail_first -= 1
            return web.Response(status=500)
        if 200 <= b.status < 300:
            self.deliveries.append(
                Delivery(topic, job_id, time.time(), dict(request.headers), body)
            )
        headers = {"Retry-After": b.retry_after} if b.retry_after else {}
        return web.Response(status=b.status, headers=headers)

    def url(self, topic: str) -> str:
        return f"{self.base}/t/{topic}"

    def of(self, topic: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.topic == topic]

    def per_second(self, topic: str) -> dict[int, int]:
        return dict(Counter(int(d.at) for d in self.of(topic)))

    async def wait_for(self, predicate: Any, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return True
            await asyncio.sleep(0.05)
        return bool(predicate())

    def release_hung(self) -> None:
        for fut in self._hung:
            if not fut.done():
                fut.set_result(None)


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    s = Sink()
    app = web.Application()
    app.router.add_route("*", "/t/{topic}", s.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    s.base = f"http://127.0.0.1:{site.port}"
    yield s
    s.release_hung()
    await runner.cleanup()


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


class WorkerProcess:
    def __init__(
        self,
        settings: Settings,
        log_path: Path,
        worker_id: str,
        *,
        standalone: bool = True,
        **env: str,
    ) -> None:
        self.log_path = log_path
        self.worker_id = worker_id
        self.standalone = standalone  # False: join the fleet through ZooKeeper
        self.env = (
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
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "emq", "worker", "--id", self.worker_id]
                + (["--standalone"] if self.standalone else []),
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 20) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]


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
    for w in started:
        w.stop()


def full_seconds(per_second: dict[int, int]) -> list[int]:
    """Counts of the complete seconds (the first and last are partial)."""
    seconds = sorted(per_second)
    return [per_second[s] for s in seconds[1:-1]]

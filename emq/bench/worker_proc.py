"""One worker in its own process, for ``emq bench dispatch`` (so its CPU and memory are its own).

    python -m emq.bench.worker_proc SPEC.json

The spec (written by the benchmark) names the Redis URL and key prefix, the worker settings, the
tenant's topics (a topic may name another tenant: W8) and whether delivery is a no-op. The worker
is the real one (``worker.runtime.Worker`` with real Redis queues, Redis history, the standalone
assignment and the push executor allowing ``127.0.0.0/8``), wired as ``emq worker --standalone``
wires it, except that topic configuration comes from an in-memory store filled from the spec
instead of ZooKeeper: a ZooKeeper process would compete for this machine's two cores and measure
nothing of the worker.

Control by signal, so that an idle worker spends nothing on being observed:

* ``SIGUSR1``: create the spec's topics (when started with ``"topics_at_start": false``, the
  benchmark measures the worker's memory before and after it owns them);
* ``SIGUSR2``: write a status snapshot (groups owned, jobs delivered, ...) to ``status_path``;
* ``SIGTERM``/``SIGINT``: the worker's graceful shutdown.

With ``"key_trace": PATH`` the keyed jobs' stamps (:mod:`emq.bench.keytrace`) are written to
PATH when the worker has stopped.
"""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import uvloop

from adapters.memory_config import MemoryConfigStore
from adapters.redis_history import RedisHistoryStore
from adapters.redis_jobs import RedisJobStore
from adapters.redis_packing import packed_by_hiredis
from adapters.redis_queue import connect
from emq.bench.keytrace import KeyTrace, TracingPusher, install
from emq.core.interfaces import Pusher, PushRequest, PushResult
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.naming import RedisKeys
from worker.main import raise_fd_limit, tune_gc
from worker.pushers import make_pusher
from worker.runtime import Worker
from worker.settings import WorkerSettings
from worker.ssrf import AddressPolicy
from worker.standalone import StandaloneAssignment

log = logging.getLogger(__name__)

GC_TIME = [0.0, 0.0]  # seconds spent collecting, start of the current collection
GC_BY_GENERATION = [0.0, 0.0, 0.0]  # the same seconds by the generation collected


def _time_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        GC_TIME[1] = time.perf_counter()
    else:
        spent = time.perf_counter() - GC_TIME[1]
        GC_TIME[0] += spent
        GC_BY_GENERATION[info["generation"]] += spent


gc.callbacks.append(_time_gc)

NAMESPACE = Namespace.ONLINE
ALLOW = (ipaddress.ip_network("127.0.0.0/8"),)
CLIENT_ENV = "EMQ_WORKER_HTTP_CLIENT"


class NoopPusher(Pusher):
    """Delivers nothing and answers 200 at once: what is left is the worker's own cost."""

    async def push(self, request: PushRequest) -> PushResult:
        return PushResult(200, 0.0)

    async def aclose(self) -> None:
        return None


def topics_of(spec: dict[str, Any]) -> list[Topic]:
    tenant = spec["tenant"]
    return [
        Topic(
            TopicRef(NAMESPACE, t.get("tenant", tenant), t["topic"]),
            t["qps"],
            t.get("groups", 1),
            endpoint_concurrency=t.get("endpoint_concurrency", 32),
            max_backlog=1_000_000_000,
            secret=t.get("secret", ""),
            paused=t.get("paused", False),
        )
        for t in spec["topics"]
    ]


class Control:
    """The signal-driven side: loading topics and writing status snapshots."""

    def __init__(self, spec: dict[str, Any], config: MemoryConfigStore, worker: Worker) -> None:
        self._spec = spec
        self._config = config
        self._worker = worker
        self._path = Path(spec["status_path"])
        self._seq = 0
        self.loaded = False

    async def load_topics(self) -> None:
        if self.loaded:
            return
        self.loaded = True
        for topic in topics_of(self._spec):
            await self._config.create_topic(topic)  # no await inside: one snapshot for all

    def write_status(self) -> None:
        w = self._worker
        self._seq += 1
        stats = [t.stats for t in w.topics.values()]
        status = {
            "seq": self._seq,
            "pid": os.getpid(),
            "time": time.time(),
            "topics_loaded": self.loaded,
            "topics": len(w.topics),
            "groups": len(w.groups),
            "generation": w.owned_generation,
            "delivered": sum(s.delivered for s in stats),
            "failed": sum(s.failed for s in stats),
            "retried": sum(s.retried for s in stats),
            "dead_lettered": sum(s.dead_lettered for s in stats),
            "grants_moved": {
                "late_send": sum(s.moved_late_send for s in stats),
                "late_write": sum(s.moved_late_write for s in stats),
            },
            "in_flight": sum(t.in_flight for t in w.topics.values()),
            "buffered": sum(g.buffered() for g in w.groups.values()),
            "buffered_bytes": w.fetcher.budget.used,
            "fetch_round_trips": w.fetcher.reads,
            "send_limit": w.governor.limit,
            "send_limit_lowest": w.governor.lowest,
            "senders": len(w.senders),
            "senders_most": w.senders.most_tasks,
            "detached": w.senders.detached,
            "loop_lag_s": round(w.metrics.last_loop_lag_s, 4),  # how late the last timer ran
            "gc_collections": [g["collections"] for g in gc.get_stats()],
            "gc_s": round(GC_TIME[0], 3),
            "gc_s_by_generation": [round(s, 3) for s in GC_BY_GENERATION],
        }
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps(status))
        tmp.replace(self._path)  # the reader never sees half a file


async def run(spec: dict[str, Any]) -> None:
    # EMQ_WORKER_HTTP_CLIENT picks the push executor here as in ``emq worker`` (the benchmark
    # compares them: ``EMQ_WORKER_HTTP_CLIENT=lean emq bench dispatch --workload W2``).
    client = {"http_client": os.environ[CLIENT_ENV]} if CLIENT_ENV in os.environ else {}
    settings = WorkerSettings(**{"metrics_port": "0", **client, **spec.get("settings", {})})
    queues = await connect(spec["redis_url"], cluster=False, prefix=spec["prefix"])
    history = RedisHistoryStore(
        packed_by_hiredis(aioredis.Redis.from_url(spec["redis_url"])),
        RedisKeys(spec["prefix"]),
        owns_client=True,
    )
    config = MemoryConfigStore()
    for tenant in {spec["tenant"], *(t.get("tenant", spec["tenant"]) for t in spec["topics"])}:
        await config.create_tenant(Tenant(tenant, "bench", "0" * 64, time.time()))
    assignment = StandaloneAssignment(config, NAMESPACE)
    pusher: Pusher = NoopPusher()
    if not spec.get("noop"):
        pusher = executor = make_pusher(settings, AddressPolicy(ALLOW))
        await executor.start()
    trace = None
    if spec.get("key_trace"):  # W12: where a key's cycle goes (emq.bench.keytrace)
        trace = KeyTrace()
        install(trace)
        pusher = TracingPusher(pusher, trace)
    try:
        await _run_worker(spec, settings, queues, config, assignment, pusher, history)
    finally:
        if trace is not None:
            trace.write(Path(spec["key_trace"]))
        await pusher.aclose()
        await history.aclose()
        await config.aclose()
        await queues.aclose()


async def _run_worker(
    spec: dict[str, Any],
    settings: WorkerSettings,
    queues: Any,
    config: MemoryConfigStore,
    assignment: StandaloneAssignment,
    pusher: Pusher,
    history: RedisHistoryStore,
) -> None:
    client = packed_by_hiredis(aioredis.Redis.from_url(spec["redis_url"]))  # as emq.compose
    jobs = RedisJobStore(client, RedisKeys(spec["prefix"]), owns_client=True)
    try:
        await _serve(spec, settings, queues, config, assignment, pusher, history, jobs)
    finally:
        await jobs.aclose()


async def _serve(
    spec: dict[str, Any],
    settings: WorkerSettings,
    queues: Any,
    config: MemoryConfigStore,
    assignment: StandaloneAssignment,
    pusher: Pusher,
    history: RedisHistoryStore,
    jobs: RedisJobStore,
) -> None:
    worker = Worker(
        spec.get("worker_id", "bench-worker"),
        NAMESPACE,
        settings,
        queues=queues,
        config=config,
        assignment=assignment,
        pusher=pusher,
        history=history,
        # as ``emq worker`` does: job records and snapshots are part of what is measured
        jobs=jobs,
    )
    control = Control(spec, config, worker)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    tasks: set[asyncio.Task[None]] = set()

    def load() -> None:
        task = loop.create_task(control.load_topics())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    raise_fd_limit(settings.max_in_flight)  # as ``emq worker`` does
    tune_gc()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, load)
    loop.add_signal_handler(signal.SIGUSR2, control.write_status)
    if spec.get("topics_at_start", True):
        await control.load_topics()
    follow = asyncio.create_task(assignment.run())
    control.write_status()  # the benchmark waits for the first snapshot: the worker is up
    try:
        await worker.run(stop)
    finally:
        follow.cancel()
        await asyncio.gather(follow, *tasks, return_exceptions=True)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python -m emq.bench.worker_proc SPEC.json")
    spec = json.loads(Path(sys.argv[1]).read_text())
    logging.basicConfig(
        level=spec.get("log_level", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    uvloop.run(run(spec))


if __name__ == "__main__":
    main()

"""``emq bench dispatch`` W9 and W10: priority under a backlog, and memory bounded in bytes.

* **W9** priority under backlog: a 20 QPS topic with 10 000 ``low`` jobs backlogged shares one
  worker with ten 100 QPS topics (2000 backlogged each, so they share its reads); ``high`` jobs
  of the 20 QPS topic arrive at 2/s. ``high_p99_ms``: sink arrival minus the ``X-Bench-Sent``
  stamp taken just before each put, against 1/qps + 150 ms = 200 ms (ARCHITECTURE.md invariant
  5: a high waiting in Redis is not held back by the lows already buffered).
* **W10** memory: 1000 topics (1000 groups), each with ``W10_JOBS`` backlogged jobs of 256 KiB
  (500 MiB), the worker with its default byte budget (``EMQ_WORKER_BUFFER_BYTES``, 256 MiB).
  The topics are paused: nothing drains the buffers, the worst case for memory (the fetcher
  fills buffers of paused topics too, so they start at once on resume); a no-op pusher.
  ``rss_over_budget_mib``: the worker's peak RSS minus the budget, against 150 MiB.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from emq.bench.harness import (
    HEADERS,
    CpuMeter,
    Harness,
    job_item,
    preload,
    rss_mib,
    share,
    stopping,
    topic_ref,
)
from emq.bench.workloads import judge, quantile, start_worker, topic_specs
from emq.core.interfaces import PutItem
from emq.core.model import Envelope, Job, Priority, QueueRef
from worker.settings import WorkerSettings

W9_QPS = 20
W9_LOWS = 10_000
W9_BUSY = [f"w9-busy-{i}" for i in range(10)]
W9_BUSY_QPS = 100
W9_BUSY_JOBS = 2000
W9_HIGHS_PER_S = 2.0

W10_TOPICS = [f"w10-{i:04d}" for i in range(1000)]
W10_JOB_BYTES = 256 * 1024
W10_JOBS = 2  # per group: 500 MiB in Redis, about twice the budget
W10_BUDGET_MIB = WorkerSettings().buffer_bytes // 2**20


async def w9(h: Harness, duration_s: float) -> dict[str, Any]:
    backend = await h.fresh("W9")
    low = topic_ref("w9").group(0).queue(Priority.LOW)
    await preload(backend, (job_item(low, f"{h.sink_base}/t/w9-low") for _ in range(W9_LOWS)))
    busy = [topic_ref(t).group(0).queue(Priority.MEDIUM) for t in W9_BUSY]
    items = (
        job_item(q, f"{h.sink_base}/t/{q.group.topic.topic}")
        for _ in range(W9_BUSY_JOBS)
        for q in busy
    )
    await preload(backend, items, parallel=2)
    spec = topic_specs(["w9"], W9_QPS) + topic_specs(W9_BUSY, W9_BUSY_QPS)
    worker = await start_worker(h, "w9", {"topics": spec})
    high = low.group.queue(Priority.HIGH)
    fed = 0
    with stopping(worker):
        worker.load_topics()
        await worker.wait_for("delivered", 5 * W9_QPS, timeout_s=30)  # lows flow, buffers full
        meter = CpuMeter({"worker": worker.pid}).start()
        next_at = time.monotonic()
        end = next_at + duration_s
        while next_at < end:
            stamp = {"X-Bench-Sent": f"{time.time():.6f}"}
            item = job_item(high, f"{h.sink_base}/t/w9-high", stamp)
            await backend.put([item])
            fed += 1
            next_at += 1.0 / W9_HIGHS_PER_S
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await asyncio.sleep(1.0 / W9_QPS + 1.0)
        used = meter.read()
    stats = await h.sink_call("/_stats")
    latencies = stats["latency_ms"].get("w9-high", [])
    return judge(
        "W9",
        {
            "high_p99_ms": round(quantile(latencies, 0.99), 2),
            "high_p50_ms": round(quantile(latencies, 0.5), 2),
            "high_max_ms": round(max(latencies, default=0.0), 2),
            "highs_fed": fed,
            "highs_delivered": len(latencies),
            "topic_qps": W9_QPS,
            "worker_cpu_pct_of_core": share(used)["worker"],
        },
    )


def _big_item(queue: QueueRef, n: int) -> PutItem:
    job_id = f"msg_w10_{queue.group.topic.topic}_{n}"
    job = Job(url="http://127.0.0.1:9/", headers=HEADERS, body="x" * W10_JOB_BYTES)
    return PutItem(queue, job_id, Envelope(job_id, job, int(time.time() * 1000)).encode())


async def w10(h: Harness, duration_s: float) -> dict[str, Any]:
    backend = await h.fresh("W10")
    queues = [topic_ref(t).group(0).queue(Priority.MEDIUM) for t in W10_TOPICS]
    items = (_big_item(q, n) for n in range(W10_JOBS) for q in queues)
    stored = await preload(backend, items, batch=50, parallel=2)
    specs = topic_specs(W10_TOPICS, 1, paused=True)
    worker = await start_worker(h, "w10", {"topics": specs, "noop": True})
    peak = 0.0
    with stopping(worker):
        start_rss = rss_mib(worker.pid)
        worker.load_topics()
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            peak = max(peak, rss_mib(worker.pid))
            await asyncio.sleep(0.1)
        held = await worker.status()
    return judge(
        "W10",
        {
            "rss_over_budget_mib": round(peak - W10_BUDGET_MIB, 1),
            "peak_rss_mib": round(peak, 1),
            "rss_before_mib": round(start_rss, 1),
            "budget_mib": W10_BUDGET_MIB,
            "backlog_mib": round(stored * W10_JOB_BYTES / 2**20),
            "groups": held["groups"],
            "buffered_jobs": held["buffered"],
            "buffered_mib": round(held["buffered_bytes"] / 2**20, 1),
        },
    )

"""Workloads W4 (what 10 000 mostly idle queues cost a worker: CPU and memory) and W5
(delivery latency at low load), for ``emq bench dispatch``."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from capacity import group_count
from emq.bench.harness import (
    CpuMeter,
    Harness,
    WorkerHandle,
    job_item,
    rss_mib,
    share,
    stopping,
    topic_ref,
)
from emq.bench.workloads import (
    judge,
    quantile,
    start_worker,
    topic_specs,
)
from emq.core.model import Priority
from worker.settings import WorkerSettings

# --------------------------------------------------------------------------- W4


W4_TOPICS = [f"w4-{i:04d}" for i in range(3334)]
W4_ACTIVE = 100  # medium queues of the first 100 topics: 1 % of 10 002
W4_FEED_PER_QUEUE_S = 1.0


async def w4(h: Harness, duration_s: float) -> dict[str, Any]:
    await h.fresh("W4")
    queues = 3 * len(W4_TOPICS)
    sweep_s = WorkerSettings().sweep_interval_s
    worker = await start_worker(h, "w4", {"topics": topic_specs(W4_TOPICS, 10)})
    with stopping(worker):
        await asyncio.sleep(2)
        rss_before = rss_mib(worker.pid)
        empty = await _cost(h, worker, 5.0)
        started = time.monotonic()
        worker.load_topics()
        status = await worker.wait_for("groups", len(W4_TOPICS), timeout_s=180, every_s=0.5)
        own_s = time.monotonic() - started
        await asyncio.sleep(3)  # the first read of every queue, then quiet
        rss_after = rss_mib(worker.pid)
        idle = await _cost(h, worker, max(duration_s, sweep_s))
        active, fed = await _active(h, worker, duration_s)
        rss_end = rss_mib(worker.pid)
    delivered = (await h.sink_call("/_stats"))["requests"]
    return judge(
        "W4",
        {
            "idle_cpu_pct_of_core": idle["cpu_pct_of_core"],
            "rss_mib_per_10k_queues": round((rss_after - rss_before) * 10_000 / queues, 1),
            "active_cpu_pct_of_core": active["cpu_pct_of_core"],
            "idle_redis_ops_per_s": idle["redis_ops_per_s"],
            "active_redis_ops_per_s": active["redis_ops_per_s"],
            "queues": queues,
            "groups_owned": status["groups"],
            "seconds_to_own": round(own_s, 1),
            "worker_rss_mib": {
                "before_owning": round(rss_before, 1),
                "after_owning": round(rss_after, 1),
                "after_active": round(rss_end, 1),
            },
            "no_groups": empty,
            "idle": idle,
            "active": active,
            "active_queues": W4_ACTIVE,
            "jobs_fed": fed,
            "jobs_delivered": delivered,
        },
    )


async def _cost(h: Harness, worker: WorkerHandle, seconds: float) -> dict[str, Any]:
    """Worker CPU and Redis commands over ``seconds`` of whatever is going on."""
    reads = (await worker.status())["fetch_round_trips"]
    commands = await h.redis_commands()
    meter = CpuMeter({"worker": worker.pid, "redis": h.redis_pid}).start()
    await asyncio.sleep(seconds)
    used = meter.read()
    commands = await h.redis_commands() - commands - 1  # not counting this INFO
    reads = (await worker.status())["fetch_round_trips"] - reads
    return {
        "seconds": round(used["wall_s"], 1),
        "cpu_pct_of_core": round(100 * used["worker"] / used["wall_s"], 2),
        "redis_cpu_pct_of_core": round(100 * used["redis"] / used["wall_s"], 2),
        "redis_ops_per_s": round(commands / used["wall_s"], 1),
        "fetch_round_trips": reads,
    }


async def _active(h: Harness, worker: WorkerHandle, seconds: float) -> tuple[dict[str, Any], int]:
    """Feed 1 job/s to each active queue; the cost with the feeder's own commands taken out."""
    assert h.queues is not None
    backend = h.queues
    queues = [topic_ref(t).group(0).queue(Priority.MEDIUM) for t in W4_TOPICS[:W4_ACTIVE]]
    url = f"{h.sink_base}/t/"
    fed = [0, 0]  # jobs, puts

    async def feed() -> None:
        tick = 0.1
        per_tick = max(1, round(len(queues) * W4_FEED_PER_QUEUE_S * tick))
        turn = itertools.cycle(queues)
        next_at = time.monotonic()
        while True:
            batch = [
                job_item(q, url + q.group.topic.topic) for q in itertools.islice(turn, per_tick)
            ]
            await backend.put(batch)
            fed[0] += len(batch)
            fed[1] += 1
            next_at += tick
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    feeder = asyncio.create_task(feed())
    try:
        await asyncio.sleep(2)
        jobs, puts = fed
        cost = await _cost(h, worker, seconds)
        jobs, puts = fed[0] - jobs, fed[1] - puts
    finally:
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)
    await asyncio.sleep(1)  # the last jobs reach the sink
    # Each put is an APPEND script (one XADD in it per job) and a ready-signal XADD; Redis
    # counts the commands a script runs too.
    feeder_ops = (2 * puts + jobs) / cost["seconds"]
    cost["feeder_redis_ops_per_s"] = round(feeder_ops, 1)
    cost["worker_redis_ops_per_s"] = round(cost["redis_ops_per_s"] - feeder_ops, 1)
    return cost, fed[0]


# --------------------------------------------------------------------------- W5


W5_QPS = 1000
W5_JOBS_PER_S = 50


async def w5(h: Harness, duration_s: float) -> dict[str, Any]:
    backend = await h.fresh("W5")
    ref = topic_ref("w5")
    groups = group_count(W5_QPS)
    worker = await start_worker(h, "w5", {"topics": topic_specs(["w5"], W5_QPS)})
    url = f"{h.sink_base}/t/w5"
    fed = 0
    with stopping(worker):
        worker.load_topics()
        await worker.wait_for("groups", groups, timeout_s=30)
        meter = CpuMeter({"worker": worker.pid}).start()
        end = time.monotonic() + 1.0 + duration_s
        next_at = time.monotonic()
        while next_at < end:
            if fed == W5_JOBS_PER_S:  # the first second warms connections up: not counted
                await h.sink_call("/_reset")
            queue = ref.group(fed % groups).queue(Priority.HIGH)
            item = job_item(queue, url, {"X-Bench-Sent": f"{time.time():.6f}"})
            await backend.put([item])
            fed += 1
            next_at += 1.0 / W5_JOBS_PER_S
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await asyncio.sleep(1.0)
        used = meter.read()
    stats = await h.sink_call("/_stats")
    latencies = stats["latency_ms"].get("w5", [])
    result = judge(
        "W5",
        {
            "p99_ms": round(quantile(latencies, 0.99), 2),
            "p50_ms": round(quantile(latencies, 0.5), 2),
            "p90_ms": round(quantile(latencies, 0.9), 2),
            "max_ms": round(max(latencies, default=0.0), 2),
            "samples": len(latencies),
            "jobs_fed": fed,
            "jobs_per_s": W5_JOBS_PER_S,
            "topic_qps": W5_QPS,
            "groups": groups,
            "worker_cpu_pct_of_core": share(used)["worker"],
        },
    )
    if h.link_rtt_ms is not None:  # Redis a hop away: each round trip on the path costs it
        bound = 3 * h.link_rtt_ms + 20
        result["targets"]["p99_ms"] = f"<= {bound:g}"
        result["pass"]["p99_ms"] = result["p99_ms"] <= bound
    return result

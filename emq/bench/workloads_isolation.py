"""Workloads W6 and W6b (hanging and slow endpoints do not slow the healthy topics), for
``emq bench dispatch``."""

from __future__ import annotations

from typing import Any

from emq.bench.harness import (
    CpuMeter,
    Harness,
    job_item,
    preload,
    round_robin,
    share,
    stopping,
    topic_ref,
)
from emq.bench.workloads import (
    judge,
    sleep_until,
    start_worker,
    topic_specs,
    wait_first_delivery,
    window,
)
from emq.core.model import Priority
from worker.settings import WorkerSettings

# --------------------------------------------------------------------------- W6


W6_TOPICS = [f"w6-{i:03d}" for i in range(100)]
W6_HANGING = W6_TOPICS[:10]
W6_HEALTHY = W6_TOPICS[10:]
W6_QPS = 50
W6_WARMUP_S = 3
W6_SETTINGS = {"request_timeout_s": 2.0}


async def w6(h: Harness, duration_s: float) -> dict[str, Any]:
    seconds = max(3, int(duration_s))
    without = await _w6_run(h, seconds, hang=False)
    with_hangs = await _w6_run(h, seconds, hang=True)
    quota = W6_QPS * len(W6_HEALTHY)
    return judge(
        "W6",
        {
            "healthy_vs_no_hang": round(with_hangs["healthy_per_s"] / without["healthy_per_s"], 4),
            "healthy_vs_quota": round(with_hangs["healthy_per_s"] / quota, 4),
            "healthy_per_s": with_hangs["healthy_per_s"],
            "healthy_per_s_without_hangs": without["healthy_per_s"],
            "healthy_quota_per_s": quota,
            "hanging_topics": len(W6_HANGING),
            "endpoint_concurrency": 4,
            "request_timeout_s": W6_SETTINGS["request_timeout_s"],
            "seconds": seconds,
            "runs": {"without_hangs": without, "with_hangs": with_hangs},
        },
    )


async def _w6_run(h: Harness, seconds: int, *, hang: bool) -> dict[str, Any]:
    backend = await h.fresh("W6")
    per_topic = int(W6_QPS * (W6_WARMUP_S + seconds + 8) * 1.2)
    queues = [topic_ref(t).group(0).queue(Priority.MEDIUM) for t in W6_TOPICS]
    hanging = set(W6_HANGING) if hang else set()

    def url(topic: str) -> str:
        return f"{h.sink_base}/{'hang' if topic in hanging else 't'}/{topic}"

    items = (job_item(q, url(q.group.topic.topic)) for q in round_robin(queues, per_topic))
    jobs = await preload(backend, items)
    spec = {
        "topics": topic_specs(W6_TOPICS, W6_QPS, endpoint_concurrency=4),
        "settings": W6_SETTINGS,
    }
    worker = await start_worker(h, "w6-hang" if hang else "w6", spec)
    with stopping(worker):
        worker.load_topics()
        first = int(await wait_first_delivery(h)) + W6_WARMUP_S
        await sleep_until(first + seconds + 0.2)
        stats = await h.sink_call("/_stats")
        status = await worker.status()
    delivered = sum(sum(c) for c in window(stats, W6_HEALTHY, first, seconds))
    return {
        "healthy_per_s": round(delivered / seconds, 1),
        "jobs": jobs,
        "hung_requests_at_sink": stats["hung"],
        "worker_failed": status["failed"],
        "worker_retried": status["retried"],
    }


# --------------------------------------------------------------------------- W6b


W6B_HANGING = [f"w6b-hang-{i:02d}" for i in range(50)]
W6B_SLOW = [f"w6b-slow-{i:02d}" for i in range(50)]
W6B_HEALTHY = [f"w6b-ok-{i}" for i in range(4)]
W6B_QPS = 50  # each hanging or slow topic (endpoint concurrency 32, the default)
W6B_HEALTHY_QPS = 150
W6B_SLOW_MS = 5000
# Not counted: the first seconds, while the worker opens 3200 connections at once (at start only;
# about a second of its CPU) and learns which endpoints are slow. Counted from then on for at
# least 12 s: the first requests time out 10 s after they began, and their retries are inside.
W6B_WARMUP_S = 4
W6B_MIN_SECONDS = 12


async def w6b(h: Harness, duration_s: float) -> dict[str, Any]:
    """50 hanging + 50 slow (5 s) topics beside 4 healthy ones, one worker with its defaults."""
    seconds = max(W6B_MIN_SECONDS, int(duration_s))
    backend = await h.fresh("W6b")
    settings = WorkerSettings()
    healthy_jobs = int(W6B_HEALTHY_QPS * (W6B_WARMUP_S + seconds + 8) * 1.2)
    slow_jobs = int(32 * 1000 / W6B_SLOW_MS * (W6B_WARMUP_S + seconds + 8) * 1.2)
    paths = {t: f"hang/{t}" for t in W6B_HANGING}
    paths |= {t: f"slow/{W6B_SLOW_MS}/{t}" for t in W6B_SLOW}
    paths |= {t: f"t/{t}" for t in W6B_HEALTHY}
    counts = {t: 200 for t in W6B_HANGING} | {t: slow_jobs for t in W6B_SLOW}
    counts |= {t: healthy_jobs for t in W6B_HEALTHY}
    jobs = 0
    for topic, n in counts.items():
        queue = topic_ref(topic).group(0).queue(Priority.MEDIUM)
        url = f"{h.sink_base}/{paths[topic]}"
        jobs += await preload(backend, (job_item(queue, url) for _ in range(n)))
    specs = topic_specs(W6B_HANGING + W6B_SLOW, W6B_QPS)
    specs += topic_specs(W6B_HEALTHY, W6B_HEALTHY_QPS)
    worker = await start_worker(h, "w6b", {"topics": specs})
    with stopping(worker):
        meter = CpuMeter({"worker": worker.pid, "sink": h.sink_pid}).start()
        worker.load_topics()
        first = int(await wait_first_delivery(h)) + W6B_WARMUP_S
        await sleep_until(first + seconds + 0.2)
        stats = await h.sink_call("/_stats")
        status = await worker.status()
        used = meter.read()
    healthy = window(stats, W6B_HEALTHY, first, seconds)
    ratios = [n / W6B_HEALTHY_QPS for counts_ in healthy for n in counts_]
    slow = sum(sum(c) for c in window(stats, W6B_SLOW, first, seconds))
    delivered = sum(sum(c) for c in healthy)
    return judge(
        "W6b",
        {
            "healthy_vs_quota": round(delivered / seconds / (W6B_HEALTHY_QPS * 4), 4),
            "healthy_per_s": round(delivered / seconds, 1),
            "healthy_quota_per_s": W6B_HEALTHY_QPS * len(W6B_HEALTHY),
            "healthy_second_ratio_min": round(min(ratios), 4),
            "healthy_second_ratio_max": round(max(ratios), 4),
            "healthy_per_second": [sum(c) for c in zip(*healthy, strict=True)],
            "slow_per_s": round(slow / seconds, 1),
            "slow_expected_per_s": round(len(W6B_SLOW) * 32 * 1000 / W6B_SLOW_MS, 1),
            "hung_requests_at_sink": stats["hung"],
            "hanging_topics": len(W6B_HANGING),
            "slow_topics": len(W6B_SLOW),
            "healthy_topics": len(W6B_HEALTHY),
            "endpoint_concurrency": 32,
            "request_timeout_s": settings.request_timeout_s,
            "senders": settings.senders,
            "seconds": seconds,
            "jobs": jobs,
            "cpu_pct_of_core": share(used),
            "worker_status": status,
        },
    )

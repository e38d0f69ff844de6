"""The workloads of ``emq bench dispatch`` (what each measures: :mod:`emq.bench.dispatch`):
their targets, what they share, and W2 (throughput).

Each is ``async (harness, duration_s) -> result``: it empties Redis, stores or feeds its jobs,
runs one worker process, and returns its figures judged against the issue's targets. The others
are in :mod:`emq.bench.workloads_pace` (W3 rate accuracy, W11 keyed order),
:mod:`emq.bench.workloads_idle` (W4 idle cost of many queues, W5 latency) and
:mod:`emq.bench.workloads_isolation` (W6, W6b: hanging and slow endpoints); W9 and W10 in
:mod:`emq.bench.priority`.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
from typing import Any

from capacity import group_count
from emq.bench.harness import (
    SECRET,
    Contention,
    CpuMeter,
    Harness,
    WorkerHandle,
    job_item,
    json_of,
    preload,
    round_robin,
    rss_mib,
    share,
    stopping,
    topic_ref,
)
from emq.bench.machine import describe
from emq.bench.push_clients import client_run
from emq.core.errors import EmqError
from emq.core.model import PRIORITIES
from worker.settings import WorkerSettings

WORKLOADS = (
    "W2", "W3", "W4", "W5", "W6", "W6b", "W7", "W8", "W9", "W10", "W11", "W12", "paced",
)  # fmt: skip
TARGETS: dict[str, dict[str, tuple[str, float]]] = {
    "W2": {"jobs_per_s": (">=", 10_000), "ratio": (">=", 0.75)},
    "W2-noop": {"cpu_us_per_job": ("<=", 15)},
    "W3": {
        "ratio_p99": ("<=", 1.02),
        "ratio_max": ("<=", 1.05),
        "sliding_max": ("<=", 1.02),
        "sustained_min": (">=", 0.98),
    },
    "W11": {"inversions": ("<=", 0)},
    "W12": {"inversions": ("<=", 0)},
    "W7": {"jobs_per_s_spread": ("<=", 1.2), "cpu_per_job_spread": ("<=", 1.2)},
    "W8": {"cpu_ratio_to_w2": ("<=", 1.2)},
    "W4": {"idle_cpu_pct_of_core": ("<=", 2.0), "rss_mib_per_10k_queues": ("<=", 20)},
    "W5": {"p99_ms": ("<=", 20)},
    "W6": {"healthy_vs_no_hang": (">=", 0.95)},
    "W6b": {"healthy_vs_quota": (">=", 0.95)},
    "W9": {"high_p99_ms": ("<=", 200)},  # 1/qps + 150 ms at 20 QPS (emq.bench.priority)
    "W10": {"rss_over_budget_mib": ("<=", 150)},
    "paced": {"cpu_ratio_to_w2": ("<=", 1.5)},  # issue 32 (emq.bench.workloads_paced)
}
SENDERS = WorkerSettings().senders


def judge(name: str, figures: dict[str, Any]) -> dict[str, Any]:
    """``figures`` with the workload's targets and whether each is met."""
    targets = TARGETS[name]
    passed = {
        key: (figures[key] >= bound if op == ">=" else figures[key] <= bound)
        for key, (op, bound) in targets.items()
    }
    return {
        "bench": "dispatch",
        "workload": name,
        "targets": {key: f"{op} {bound:g}" for key, (op, bound) in targets.items()},
        "pass": passed,
        **figures,
        "machine": describe(),
    }


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def topic_specs(names: list[str], qps: int, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"topic": n, "qps": qps, "groups": group_count(qps), "secret": SECRET, **extra}
        for n in names
    ]


async def start_worker(h: Harness, name: str, spec: dict[str, Any]) -> WorkerHandle:
    """A worker that has started but owns nothing yet (``load_topics`` gives it the topics)."""
    worker = h.worker(name, {"topics_at_start": False, **spec})
    try:
        await worker.ready()
    except BaseException:
        worker.stop()
        raise
    return worker


async def wait_first_delivery(h: Harness, timeout_s: float = 60.0) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = await h.sink_call("/_stats")
        if stats["requests"]:
            return float(stats["first_at"])
        await asyncio.sleep(0.1)
    raise EmqError(f"no delivery reached the sink within {timeout_s:.0f} s")


def window(stats: dict[str, Any], topics: list[str], first: int, seconds: int) -> list[list[int]]:
    """Per topic, its deliveries in each wall-clock second ``first .. first + seconds - 1``."""
    per_second = stats["per_second"]
    return [
        [per_second.get(t, {}).get(str(s), 0) for s in range(first, first + seconds)]
        for t in topics
    ]


async def sleep_until(wall: float) -> None:
    await asyncio.sleep(max(0.0, wall - time.time()))


# --------------------------------------------------------------------------- W2


W2_TOPICS = [f"w2-{i:04d}" for i in range(1000)]


def _excerpt_bytes() -> int:
    """``BENCH_EXCERPT_BYTES``: W2's topics keep that much of each answer in the attempt
    log, and the sink answers that much body (or ``BENCH_BODY_BYTES``: docs/concepts/
    attempts.md); unset: 0."""
    return int(os.environ.get("BENCH_EXCERPT_BYTES", "0") or 0)


async def _w2_preload(h: Harness, jobs: int) -> int:
    backend = await h.fresh("W2")
    queues = [topic_ref(t).group(0).queue(p) for t in W2_TOPICS for p in PRIORITIES]
    per_queue = max(1, math.ceil(jobs / len(queues)))
    body = int(os.environ.get("BENCH_BODY_BYTES", "0") or 0) or _excerpt_bytes()
    url = f"{h.sink_base}/body/{body}/" if body else f"{h.sink_base}/t/"
    items = (job_item(q, url + q.group.topic.topic) for q in round_robin(queues, per_queue))
    return await preload(backend, items)


async def drain(
    h: Harness, worker: WorkerHandle, jobs: int
) -> tuple[dict[str, float], dict[str, Any]]:
    """Give the worker its topics and wait until it delivered ``jobs``: (CPU used, status)."""
    pids = {"worker": worker.pid, "sink": h.sink_pid, "redis": h.redis_pid, **h.link_pids()}
    meter = CpuMeter(pids).start()
    worker.load_topics()
    status = await worker.wait_for("delivered", jobs, timeout_s=60 + jobs / 1000, every_s=0.1)
    used = meter.read()
    if status["delivered"] < jobs:
        raise EmqError(f"the worker delivered {status['delivered']} of {jobs} jobs in time")
    return used, status


async def w2(h: Harness, duration_s: float) -> dict[str, Any]:
    jobs = int(15_000 * duration_s)
    # Client and worker take turns, each measured more than once, so that what else runs on
    # this shared machine weighs on both sides of the ratio alike; each side's best run counts
    # (the client's at any concurrency: 64 is its best, 256 the worker's pool).
    ceilings = [await _ceiling(h, 64, duration_s)]
    runs = [await _w2_worker(h, jobs, SENDERS)]
    ceilings.append(await _ceiling(h, 64, duration_s))
    runs.append(await _w2_worker(h, jobs, SENDERS))
    ceilings.append(await _ceiling(h, SENDERS, duration_s))
    best = max(c["requests_per_s"] for c in ceilings)
    run = max(runs, key=lambda r: r["jobs_per_s"])
    raw = await client_run(h.sink, "raw", 64, duration_s)  # the event loop's own floor
    return judge(
        "W2",
        {
            "jobs_per_s": run["jobs_per_s"],
            "ceiling_requests_per_s": best,
            "ratio": round(run["jobs_per_s"] / best, 3),
            "raw_ceiling_requests_per_s": raw.get("requests_per_s", 0.0),
            "ratio_to_raw": round(run["jobs_per_s"] / raw["requests_per_s"], 3)
            if raw.get("requests_per_s")
            else None,
            "raw_ceiling": raw,
            **run,
            "queues": 3 * len(W2_TOPICS),
            "ceilings": ceilings,
            "worker_runs_jobs_per_s": [r["jobs_per_s"] for r in runs],
        },
    )


async def _w2_worker(h: Harness, jobs: int, senders: int) -> dict[str, Any]:
    """A worker with ``senders`` delivers ``jobs``: jobs/s from the first to the last arrival."""
    jobs = await _w2_preload(h, jobs)
    contention = Contention(h.sink_pid, h.redis_pid, *h.link_pids().values()).start()
    excerpt = {"response_excerpt_bytes": _excerpt_bytes()} if _excerpt_bytes() else {}
    spec = {"topics": topic_specs(W2_TOPICS, 150, **excerpt), "settings": {"senders": senders}}
    worker = await start_worker(h, "w2", spec)
    with stopping(worker):
        rss = rss_mib(worker.pid)
        used, status = await drain(h, worker, jobs)
        rss_end = rss_mib(worker.pid)
    stats = await h.sink_call("/_stats")
    span = stats["last_at"] - stats["first_at"]
    whole = range(int(stats["first_at"]) + 1, int(stats["last_at"]))  # full seconds only
    totals = [sum(c) for c in zip(*window(stats, W2_TOPICS, whole.start, len(whole)), strict=True)]
    proxy_per_job = round(used.get("proxy", 0.0) / jobs * 1e6, 1)
    proxy = {"proxy_cpu_us_per_job": proxy_per_job} if "proxy" in used else {}
    return {
        "jobs_per_s": round(stats["requests"] / span, 1) if span > 0 else 0.0,
        "steady_jobs_per_s_median": statistics.median(totals) if totals else 0,
        "senders": senders,
        "jobs": jobs,
        "delivered_at_sink": stats["requests"],
        "seconds": round(span, 2),
        "worker_cpu_us_per_job": round(used["worker"] / jobs * 1e6, 1),
        **proxy,  # (Redis behind emq.rigs.netdelay: its CPU per job)
        "cpu_pct_of_core": share(used),
        "worker_rss_mib": {"start": round(rss, 1), "end": round(rss_end, 1)},
        "worker_status": status,
        "contention": contention.read(),
    }


async def _ceiling(h: Harness, concurrency: int, duration_s: float) -> dict[str, Any]:
    await h.sink_call("/_reset")
    meter = CpuMeter({"sink": h.sink_pid}).start()
    contention = Contention(h.sink_pid, h.redis_pid).start()
    found, why = await json_of(
        "emq.bench.ceiling", h.sink_base,
        "--topics", str(len(W2_TOPICS)), "--concurrency", str(concurrency),
        "--duration-s", str(duration_s), timeout_s=duration_s + 60,
    )  # fmt: skip
    if found is None:
        raise EmqError(f"the ceiling client failed: {why}")
    result: dict[str, Any] = found
    result["sink_cpu_pct_of_core"] = share(meter.read())["sink"]
    result["contention"] = contention.read()
    return result


async def w2_noop(h: Harness, duration_s: float) -> dict[str, Any]:
    jobs = await _w2_preload(h, int(40_000 * duration_s))
    spec = {"topics": topic_specs(W2_TOPICS, 150), "noop": True}
    worker = await start_worker(h, "w2-noop", spec)
    with stopping(worker):
        used, status = await drain(h, worker, jobs)
    return judge(
        "W2-noop",
        {
            "cpu_us_per_job": round(used["worker"] / jobs * 1e6, 2),
            "jobs": jobs,
            "jobs_per_s": round(jobs / used["wall_s"], 1),
            "seconds": round(used["wall_s"], 2),
            "worker_cpu_s": round(used["worker"], 2),
            "cpu_pct_of_core": share(used),
            "queues": 3 * len(W2_TOPICS),
            "worker_status": status,
        },
    )

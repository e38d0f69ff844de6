"""The workloads of ``emq bench dispatch`` (what each measures: :mod:`emq.bench.dispatch`).

Each is ``async (harness, duration_s) -> result``: it empties Redis, stores or feeds its jobs,
runs one worker process, and returns its figures judged against the issue's targets.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import statistics
import subprocess
import sys
import time
from typing import Any

from capacity import group_count
from emq.api.enqueue import jump_hash
from emq.bench.harness import (
    SECRET,
    Contention,
    CpuMeter,
    Harness,
    WorkerHandle,
    job_item,
    preload,
    round_robin,
    rss_mib,
    share,
    stopping,
    topic_ref,
)
from emq.bench.machine import describe
from emq.bench.promises import busiest_window
from emq.core.errors import EmqError
from emq.core.model import PRIORITIES, Priority
from worker.settings import WorkerSettings

WORKLOADS = ("W2", "W3", "W4", "W5", "W6", "W6b", "W9", "W10", "W11")
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
    "W4": {"idle_cpu_pct_of_core": ("<=", 2.0), "rss_mib_per_10k_queues": ("<=", 20)},
    "W5": {"p99_ms": ("<=", 20)},
    "W6": {"healthy_vs_no_hang": (">=", 0.95)},
    "W6b": {"healthy_vs_quota": (">=", 0.95)},
    "W9": {"high_p99_ms": ("<=", 200)},  # 1/qps + 150 ms at 20 QPS (emq.bench.priority)
    "W10": {"rss_over_budget_mib": ("<=", 150)},
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


async def _w2_preload(h: Harness, jobs: int) -> int:
    backend = await h.fresh("W2")
    queues = [topic_ref(t).group(0).queue(p) for t in W2_TOPICS for p in PRIORITIES]
    per_queue = max(1, math.ceil(jobs / len(queues)))
    url = f"{h.sink_base}/t/"
    items = (job_item(q, url + q.group.topic.topic) for q in round_robin(queues, per_queue))
    return await preload(backend, items)


async def _drain(
    h: Harness, worker: WorkerHandle, jobs: int
) -> tuple[dict[str, float], dict[str, Any]]:
    """Give the worker its topics and wait until it delivered ``jobs``: (CPU used, status)."""
    meter = CpuMeter({"worker": worker.pid, "sink": h.sink_pid, "redis": h.redis_pid}).start()
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
    return judge(
        "W2",
        {
            "jobs_per_s": run["jobs_per_s"],
            "ceiling_requests_per_s": best,
            "ratio": round(run["jobs_per_s"] / best, 3),
            **run,
            "queues": 3 * len(W2_TOPICS),
            "ceilings": ceilings,
            "worker_runs_jobs_per_s": [r["jobs_per_s"] for r in runs],
        },
    )


async def _w2_worker(h: Harness, jobs: int, senders: int) -> dict[str, Any]:
    """A worker with ``senders`` delivers ``jobs``: jobs/s from the first to the last arrival."""
    jobs = await _w2_preload(h, jobs)
    contention = Contention(h.sink_pid, h.redis_pid).start()
    spec = {"topics": topic_specs(W2_TOPICS, 150), "settings": {"senders": senders}}
    worker = await start_worker(h, "w2", spec)
    with stopping(worker):
        rss = rss_mib(worker.pid)
        used, status = await _drain(h, worker, jobs)
        rss_end = rss_mib(worker.pid)
    stats = await h.sink_call("/_stats")
    span = stats["last_at"] - stats["first_at"]
    whole = range(int(stats["first_at"]) + 1, int(stats["last_at"]))  # full seconds only
    totals = [sum(c) for c in zip(*window(stats, W2_TOPICS, whole.start, len(whole)), strict=True)]
    return {
        "jobs_per_s": round(stats["requests"] / span, 1) if span > 0 else 0.0,
        "steady_jobs_per_s_median": statistics.median(totals) if totals else 0,
        "senders": senders,
        "jobs": jobs,
        "delivered_at_sink": stats["requests"],
        "seconds": round(span, 2),
        "worker_cpu_us_per_job": round(used["worker"] / jobs * 1e6, 1),
        "cpu_pct_of_core": share(used),
        "worker_rss_mib": {"start": round(rss, 1), "end": round(rss_end, 1)},
        "worker_status": status,
        "contention": contention.read(),
    }


async def _ceiling(h: Harness, concurrency: int, duration_s: float) -> dict[str, Any]:
    await h.sink_call("/_reset")
    meter = CpuMeter({"sink": h.sink_pid}).start()
    contention = Contention(h.sink_pid, h.redis_pid).start()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "emq.bench.ceiling", h.sink_base,
        "--topics", str(len(W2_TOPICS)), "--concurrency", str(concurrency),
        "--duration-s", str(duration_s),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), duration_s + 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise EmqError(f"the ceiling client failed: {err.decode(errors='replace')[-500:]}")
    result: dict[str, Any] = json.loads(out)
    result["sink_cpu_pct_of_core"] = share(meter.read())["sink"]
    result["contention"] = contention.read()
    return result


async def w2_noop(h: Harness, duration_s: float) -> dict[str, Any]:
    jobs = await _w2_preload(h, int(40_000 * duration_s))
    spec = {"topics": topic_specs(W2_TOPICS, 150), "noop": True}
    worker = await start_worker(h, "w2-noop", spec)
    with stopping(worker):
        used, status = await _drain(h, worker, jobs)
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


# --------------------------------------------------------------------------- W3


W3_TOPICS = [f"w3-{i:02d}" for i in range(50)]
W3_QPS = 150
W3_WARMUP_S = 2


async def w3(h: Harness, duration_s: float) -> dict[str, Any]:
    seconds = max(3, int(duration_s))
    backend = await h.fresh("W3")
    per_topic = int(W3_QPS * (W3_WARMUP_S + seconds + 6) * 1.1)
    queues = [topic_ref(t).group(0).queue(Priority.MEDIUM) for t in W3_TOPICS]
    url = f"{h.sink_base}/t/"
    items = (job_item(q, url + q.group.topic.topic) for q in round_robin(queues, per_topic))
    jobs = await preload(backend, items)
    worker = await start_worker(h, "w3", {"topics": topic_specs(W3_TOPICS, W3_QPS)})
    with stopping(worker), competing(h.competitor):
        meter = CpuMeter({"worker": worker.pid, "sink": h.sink_pid}).start()
        worker.load_topics()
        first = int(await wait_first_delivery(h)) + W3_WARMUP_S
        await sleep_until(first + seconds + 0.2)
        stats = await h.sink_call("/_stats")
        used = meter.read()
    ratios = [n / W3_QPS for counts in window(stats, W3_TOPICS, first, seconds) for n in counts]
    return judge(
        "W3",
        {
            "ratio_p99": round(quantile(ratios, 0.99), 4),
            "ratio_max": round(max(ratios), 4),
            "ratio_mean": round(statistics.fmean(ratios), 4),
            "ratio_min": round(min(ratios), 4),
            **(await _sliding(h, W3_TOPICS, W3_QPS, first, seconds)),
            "competitor": h.competitor,
            "samples": len(ratios),
            "topics": len(W3_TOPICS),
            "qps": W3_QPS,
            "seconds": seconds,
            "jobs": jobs,
            "cpu_pct_of_core": share(used),
        },
    )


async def _sliding(
    h: Harness, topics: list[str], qps: int, first: int, seconds: int
) -> dict[str, Any]:
    """From the sink's delivery log: per topic, the busiest sliding 1000 ms window and the rate
    over the measured seconds, as shares of ``qps`` (the worst topic's, and the p99/mean)."""
    times: dict[str, list[float]] = {t: [] for t in topics}
    end = first + seconds
    for at, topic, _, status, _ in await h.sink_log():
        if first <= at < end and topic in times and status == 200:
            times[topic].append(at)
    windows = [busiest_window(sorted(v)) / qps for v in times.values()]
    rates = [len(v) / seconds / qps for v in times.values()]
    return {
        "sliding_max": round(max(windows), 4),
        "sliding_p99": round(quantile(windows, 0.99), 4),
        "sustained_min": round(min(rates), 4),
        "sustained_mean": round(statistics.fmean(rates), 4),
    }


class competing:
    """A busy-loop process beside the worker for the block (``emq bench dispatch
    --competitor``): pacing must hold when the worker's CPU is taken by someone else."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> competing:
        if self.on:
            self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


# --------------------------------------------------------------------------- W11


W11_TOPICS = [f"w11-{i:02d}" for i in range(10)]
W11_QPS = 1000  # seven groups each
W11_KEYS = 50  # per topic


async def w11(h: Harness, duration_s: float) -> dict[str, Any]:
    """Keyed against unkeyed delivery, in one run: the same jobs (10 topics of seven groups at
    1000 QPS, backlogged), once without keys and once with 50 keys per topic; jobs/s, the
    worker's CPU per job, and the inversions of order per key at the sink (its delivery log)."""
    jobs = int(W11_QPS * len(W11_TOPICS) * max(1.0, duration_s) / 2)
    plain = await _w11_run(h, jobs, keyed=False)
    keyed = await _w11_run(h, jobs, keyed=True)
    return judge(
        "W11",
        {
            "inversions": keyed["inversions"],
            "keyed_vs_unkeyed_jobs_per_s": round(keyed["jobs_per_s"] / plain["jobs_per_s"], 3),
            "keyed_vs_unkeyed_cpu_per_job": round(
                keyed["worker_cpu_us_per_job"] / plain["worker_cpu_us_per_job"], 3
            ),
            "unkeyed": plain,
            "keyed": keyed,
        },
    )


async def _w11_run(h: Harness, jobs: int, *, keyed: bool) -> dict[str, Any]:
    backend = await h.fresh("W11")
    per_topic = jobs // len(W11_TOPICS)
    url = f"{h.sink_base}/t/"

    def items() -> Any:
        for n in range(per_topic):
            for t in W11_TOPICS:
                key = f"k{n % W11_KEYS}" if keyed else None
                # Jobs of one key go to one group (emq.api.enqueue does the same hash).
                ref = topic_ref(t)
                groups = group_count(W11_QPS)
                g = jump_hash(key, groups) if key is not None else n % groups
                q = ref.group(g).queue(Priority.MEDIUM)
                yield job_item(q, f"{url}{t}?k={key}&n={n}", key=key)

    jobs = await preload(backend, items(), parallel=1)  # (in order: n is the enqueue order)
    worker = await start_worker(h, "w11", {"topics": topic_specs(W11_TOPICS, W11_QPS)})
    with stopping(worker):
        used, _ = await _drain(h, worker, jobs)
    stats = await h.sink_call("/_stats")
    span = stats["last_at"] - stats["first_at"]
    last: dict[tuple[str, str], int] = {}
    inversions = 0
    examples = []
    for at, topic, _, _, query in await h.sink_log():
        fields = dict(p.partition("=")[::2] for p in query.split("&"))
        if fields.get("k", "None") == "None":
            continue
        n = int(fields["n"])
        if n < last.get((topic, fields["k"]), -1):
            inversions += 1
            if len(examples) < 5:
                examples.append([topic, fields["k"], last[(topic, fields["k"])], n, at])
        last[(topic, fields["k"])] = n
    return {
        "jobs": jobs,
        "jobs_per_s": round(stats["requests"] / span, 1) if span > 0 else 0.0,
        "worker_cpu_us_per_job": round(used["worker"] / jobs * 1e6, 1),
        "inversions": inversions if keyed else None,
        "inversion_examples": examples,
    }


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
    return judge(
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

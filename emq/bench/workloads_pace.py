"""Workloads W3 (quota precision: each topic delivered at its quota, second by second) and W11
(order per key, and what it costs against unkeyed jobs), for ``emq bench dispatch``."""

from __future__ import annotations

import statistics
import subprocess
import sys
from typing import Any

from capacity import group_count
from emq.api.enqueue import jump_hash
from emq.bench.harness import (
    CpuMeter,
    Harness,
    RunQueueWait,
    job_item,
    preload,
    round_robin,
    share,
    stopping,
    topic_ref,
)
from emq.bench.promises import busiest_window
from emq.bench.workloads import (
    drain,
    judge,
    quantile,
    sleep_until,
    start_worker,
    topic_specs,
    wait_first_delivery,
    window,
)
from emq.core.model import Priority

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
        await sleep_until(first)
        waited = RunQueueWait(worker.pid).start()
        await sleep_until(first + seconds + 0.2)
        stats = await h.sink_call("/_stats")
        used = meter.read()
        worker_waited = waited.read()
        status = await worker.status()
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
            # The worker's CPU per job delivered in the run: the same code costs more where the
            # machine runs it slower (a busy sibling on the core, the host), which the wait
            # below does not show.
            "worker_cpu_us_per_job": round(used["worker"] / max(1, status["delivered"]) * 1e6, 1),
            # How long the worker's event loop waited for a CPU while runnable, over the
            # measured seconds and their worst second: the machine's part in a slow run.
            "worker_runqueue_wait": worker_waited,
            # Grants moved to when their jobs went out, of the jobs delivered in the whole run
            # (emq_quota_grants_moved_total): how often the worker was late to a grant.
            "grants_moved": status["grants_moved"],
            "delivered": status["delivered"],
        },
    )


async def _sliding(
    h: Harness, topics: list[str], qps: int, first: float, seconds: float
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
        used, _ = await drain(h, worker, jobs)
    stats = await h.sink_call("/_stats")
    span = stats["last_at"] - stats["first_at"]
    last: dict[tuple[str, str], int] = {}
    inversions = 0
    examples: list[list[object]] = []
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

"""Workload W12 of ``emq bench dispatch``: a key's delivery cycle, and where it goes.

At most one job of a key is in flight, so a topic with K keys delivers at most K / cycle jobs a
second, where the *cycle* is the time from the sink answering job n of a key to job n+1 of that
key arriving there. W12 measures it on one keyed topic of ``W12_KEYS`` keys in one group whose
quota never binds (20 000 QPS: the interval between a key's jobs is then the cycle alone, not
the group's pacing), backlogged, against the fast sink, twice in one sitting:

* ``quiet``: the keyed topic alone on the worker;
* ``loaded``: beside ``W12_LOAD_TOPICS`` unkeyed topics of 150 QPS, backlogged (about 6000 jobs/s
  of other work on the same event loop, as a keyed topic meets it in a mixed run).

From the sink's delivery log, the cycle's p50/p90/p99/mean and the keyed topic's jobs/s; from
the worker's stamps (:mod:`emq.bench.keytrace`), the mean of each stage of the cycle (answer
read by the worker, key released, next job handed to a sender, its push begun, its arrival).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from emq.bench.harness import (
    SECRET,
    CpuMeter,
    Harness,
    job_item,
    preload,
    round_robin,
    stopping,
    topic_ref,
)
from emq.bench.keytrace import STAGES, key_and_n, stages
from emq.bench.workloads import judge, quantile, start_worker, topic_specs
from emq.core.errors import EmqError
from emq.core.model import Priority

W12_TOPIC = "w12-keyed"
# A few keys (as a group of a keyed topic has: 21 keys over 7 groups in the promise checker's
# seed 3), so that the cycle is the keys' latency, not the worker's throughput: 20 keys at a
# 2.5 ms cycle would be 8000 jobs/s, the worker's CPU, and the cycle then just its share.
W12_KEYS = 8
W12_QPS = 20_000  # in one group: never the limit
W12_LOAD_TOPICS = [f"w12-load-{i:02d}" for i in range(40)]
W12_LOAD_QPS = 150


async def w12(h: Harness, duration_s: float) -> dict[str, Any]:
    quiet = await _w12_run(h, duration_s, loaded=False)
    loaded = await _w12_run(h, duration_s, loaded=True)
    return judge(
        "W12",
        {
            "inversions": quiet["inversions"] + loaded["inversions"],
            "cycle_p50_ms": quiet["cycle_ms"]["p50"],
            "loaded_cycle_p50_ms": loaded["cycle_ms"]["p50"],
            "loaded_cycle_mean_ms": loaded["cycle_ms"]["mean"],
            "keys": W12_KEYS,
            "quiet": quiet,
            "loaded": loaded,
        },
    )


async def _w12_run(h: Harness, duration_s: float, *, loaded: bool) -> dict[str, Any]:
    backend = await h.fresh("W12")
    per_key = max(20, int(100 * duration_s))  # a 10 ms cycle: duration_s seconds
    keyed_q = topic_ref(W12_TOPIC).group(0).queue(Priority.MEDIUM)
    url = f"{h.sink_base}/t/{W12_TOPIC}"
    keyed = (
        job_item(keyed_q, f"{url}?k=k{k}&n={n}", key=f"k{k}")
        for n in range(per_key)
        for k in range(W12_KEYS)
    )
    jobs = await preload(backend, keyed, parallel=1)  # (in order: n is the enqueue order)
    topics = [{"topic": W12_TOPIC, "qps": W12_QPS, "groups": 1, "secret": SECRET}]
    if loaded:
        per_topic = int(W12_LOAD_QPS * (duration_s + 30))  # outlasts the keyed jobs
        queues = [topic_ref(t).group(0).queue(Priority.MEDIUM) for t in W12_LOAD_TOPICS]
        load = (
            job_item(q, f"{h.sink_base}/t/{q.group.topic.topic}")
            for q in round_robin(queues, per_topic)
        )
        await preload(backend, load)
        topics += topic_specs(W12_LOAD_TOPICS, W12_LOAD_QPS)
    trace_path = h.tmp / f"w12-{'loaded' if loaded else 'quiet'}.trace.json"
    trace_path.unlink(missing_ok=True)
    worker = await start_worker(h, "w12", {"topics": topics, "key_trace": str(trace_path)})
    with stopping(worker):
        meter = CpuMeter({"worker": worker.pid}).start()
        worker.load_topics()
        await _wait_keyed(h, jobs, timeout_s=60 + jobs / 100)
        used = meter.read()
    rows = await h.sink_log()
    arrivals = [(at, query) for at, topic, _, _, query in rows if topic == W12_TOPIC]
    figures = stages(json.loads(trace_path.read_text()), arrivals)
    span = arrivals[-1][0] - arrivals[0][0] if len(arrivals) > 1 else 0.0
    return {
        "jobs": jobs,
        "inversions": _inversions(arrivals),
        "keyed_jobs_per_s": round(len(arrivals) / span, 1) if span > 0 else 0.0,
        "cycle_ms": _ms(figures["cycle"]),
        "stage_mean_ms": {s: _ms(figures[s])["mean"] for s in STAGES},
        "stage_p90_ms": {s: _ms(figures[s])["p90"] for s in STAGES},
        "other_jobs_per_s": _other_rate(rows) if loaded else 0.0,
        # (with the stamps' cost: compare runs of W12 with each other, not with W11)
        "worker_cpu_us_per_job": round(used["worker"] / len(rows) * 1e6, 1) if rows else 0.0,
    }


async def _wait_keyed(h: Harness, jobs: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = await h.sink_call("/_stats")
        if sum(stats["per_second"].get(W12_TOPIC, {}).values()) >= jobs:
            return
        await asyncio.sleep(0.1)
    raise EmqError(f"W12: the keyed jobs were not all delivered within {timeout_s:.0f} s")


def _inversions(arrivals: list[tuple[float, str]]) -> int:
    """Jobs that reached the sink after a later job of their key."""
    last: dict[str, int] = {}
    inversions = 0
    for _, query in arrivals:
        found = key_and_n(query)
        if found is not None:
            key, n = found
            inversions += n < last.get(key, -1)
            last[key] = max(n, last.get(key, -1))
    return inversions


def _other_rate(rows: list[tuple[float, str, str, int, str]]) -> float:
    other = [at for at, topic, *_ in rows if topic != W12_TOPIC]
    span = other[-1] - other[0] if len(other) > 1 else 0.0
    return round(len(other) / span, 1) if span > 0 else 0.0


def _ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "mean": 0.0, "samples": 0}
    return {
        "p50": round(quantile(values, 0.5) * 1000, 2),
        "p90": round(quantile(values, 0.9) * 1000, 2),
        "p99": round(quantile(values, 0.99) * 1000, 2),
        "mean": round(statistics.fmean(values) * 1000, 2),
        "samples": len(values),
    }

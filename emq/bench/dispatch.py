"""``emq bench dispatch``: the worker benchmarks W2-W6, each a measured run of a real worker.

Every workload starts from an empty Redis (started by the benchmark, AOF on, as deployed) and a
sink process (:mod:`emq.rigs.sink`), runs ONE worker in its own process
(:mod:`emq.bench.worker_proc`: real Redis queues, standalone assignment, the aiohttp push
executor) and reads the worker's CPU and memory from ``/proc``. Jobs are stored before the worker
starts (backlogged) with pipelined puts of 1000, except in W4 and W5 where a feeder adds them
while measuring. Every topic has a signing secret, so every push is signed, as in production.

* **W2** throughput: 1000 topics (150 QPS, 1 group each) x high/medium/low = 3000 backlogged
  queues; ``jobs_per_s`` = jobs delivered / (last arrival - first arrival) at the sink, so every
  per-job cost (fetch, decode, dispatch, sign, push, checkpoint) is inside it. Against the same
  sink process, the plain aiohttp client ceiling (:mod:`emq.bench.ceiling`). They take turns:
  client (64 concurrent requests), worker, client (64), worker, client (``senders``, 256); the
  worker runs with its defaults (256 senders, governed), and each side's best run counts. Then
  the raw asyncio floor (:mod:`emq.bench.push_client_run` ``raw``: no client code at all) once,
  for ``ratio_to_raw``. ``EMQ_WORKER_HTTP_CLIENT`` picks the worker's push executor.
* **W2 --noop**: the same queues with a no-op pusher: worker CPU seconds per delivered job.
* **W3** quota precision: 50 topics x 150 QPS, backlogged; per topic and full wall-clock second
  at the sink, delivered / 150; from the sink's delivery log, per topic the busiest *sliding*
  1000 ms window / 150 (``sliding_max``) and the delivered rate / 150 (``sustained_min``). With
  ``--competitor`` a busy-loop process runs beside the worker (pacing when its CPU is taken).
  ``grants_moved``: the grants the worker moved to when their jobs went out, of ``delivered``
  (``late_send``: sent more than 2 ms after the grant; ``late_write``: written past the HTTP
  client's margin after its last look at the grant): how often it was late.
  ``worker_runqueue_wait``: how long the worker's event-loop thread waited for a CPU while
  runnable (``/proc/<pid>/schedstat``), as % of the measured seconds and of their worst second:
  the machine's part in a slow run (alone ~5 %, beside the busy loop 20-40 %).
* **W4** idle cost: 3334 topics x 1 group x 3 priorities = 10 002 queues; worker memory before and
  after owning them; CPU and Redis commands/s (``total_commands_processed``, which counts the
  commands Lua scripts run too) all idle over a whole sweep period, then with 1 % of the queues
  (100 medium queues) fed 1 job/s each.
* **W5** latency: a 1000 QPS topic (7 groups) fed 50 high-priority jobs/s; sink arrival minus the
  ``X-Bench-Sent`` header stamped just before each put.
* **W6** hanging endpoints: 100 topics x 50 QPS (endpoint concurrency 4, request timeout 2 s), 10
  of them pointing at ``/hang/``; the 90 healthy topics' delivered/s against their quota and
  against the same run without hangs.
* **W11** order per key and what it costs: 10 topics x 1000 QPS (7 groups), backlogged, run
  twice in one sitting, without keys and with 50 keys per topic; jobs/s, worker CPU per job, and
  jobs that reached the sink before an earlier job of their key (``inversions``).
* **W12** a key's delivery cycle (sink answer of a key's job to the arrival of its next) and
  where it goes: :mod:`emq.bench.workloads_keys`.
* **W6b** hanging and slow endpoints by the dozen: 50 topics pointing at ``/hang/`` and 50 at an
  endpoint answering after 5 s (50 QPS each, endpoint concurrency 32, so 3200 requests waiting
  at once against 256 senders) beside 4 healthy topics of 150 QPS, one worker with its default
  settings (request timeout 10 s); from 4 s after the first delivery (the worker opens 3200
  connections at start) over at least 12 s (the first timeouts and their retries inside), the
  healthy topics' delivered/s against their quota.
* **W7** cost independent of group count: :mod:`emq.bench.workloads_groups`; **W8** ten tenants
  through the API against W2: :mod:`emq.bench.workloads_api`.
* **W9** priority under backlog and **W10** memory bounded in bytes: see
  :mod:`emq.bench.priority`.
* **paced**: N topics at quota q, backlogged (``--topics``, ``--quota``): the worker's CPU per
  job, wake-ups and Redis commands while pacing, against the saturated W2 run of the same
  sitting: :mod:`emq.bench.workloads_paced` (not part of ``all``).

This machine class is shared and noisy: every result carries ``contention``, the CPU that other
processes took meanwhile, and the CPU figures are the worker's own (``/proc``), not wall time.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import uvloop

from emq.bench import netlink
from emq.bench.harness import Contention, CpuMeter, Harness
from emq.bench.machine import describe
from emq.bench.priority import w9, w10
from emq.bench.workloads import WORKLOADS, w2, w2_noop
from emq.bench.workloads_api import w8
from emq.bench.workloads_groups import w7
from emq.bench.workloads_idle import w4, w5
from emq.bench.workloads_isolation import w6, w6b
from emq.bench.workloads_keys import w12
from emq.bench.workloads_pace import w3, w11
from emq.bench.workloads_paced import MAX_QUOTA, MAX_TOPICS, QUOTAS, TOPICS, paced, parse_counts
from emq.core.errors import EmqError

SUMMARY_EXTRA = {
    "W2": (
        "ceiling_requests_per_s",
        "ratio_to_raw",
        "worker_cpu_us_per_job",
        "cpu_pct_of_core",
        "worker_runs_jobs_per_s",
    ),
    "W2-noop": ("jobs_per_s", "seconds"),
    "W3": ("ratio_mean", "sliding_p99", "sustained_mean", "competitor", "samples"),
    "W11": ("keyed_vs_unkeyed_jobs_per_s", "keyed_vs_unkeyed_cpu_per_job"),
    "W12": ("cycle_p50_ms", "loaded_cycle_p50_ms", "loaded_cycle_mean_ms", "loaded.stage_mean_ms"),
    "W7": ("jobs_per_s", "worker_cpu_us_per_job", "many_groups_cpu_ratio"),
    "W8": ("worker_cpu_us_per_job", "w2_worker_cpu_us_per_job", "jobs_per_s", "w2_jobs_per_s"),
    "W4": ("worker_rss_mib", "idle_redis_ops_per_s", "active_cpu_pct_of_core"),
    "W5": ("p50_ms", "samples"),
    "W6": ("healthy_per_s", "healthy_per_s_without_hangs", "healthy_vs_quota"),
    "W6b": ("healthy_second_ratio_min", "slow_per_s", "worker_status.senders_most"),
    "W9": ("high_p50_ms", "highs_delivered"),
    "W10": ("peak_rss_mib", "backlog_mib", "buffered_jobs"),
    "paced": ("w2_worker_cpu_us_per_job", "w2_jobs_per_s"),
}
RUNS: dict[str, Callable[[Harness, float], Awaitable[dict[str, Any]]]] = {
    "W2": w2,
    "W2-noop": w2_noop,
    "W3": w3,
    "W4": w4,
    "W5": w5,
    "W6": w6,
    "W6b": w6b,
    "W9": w9,
    "W10": w10,
    "W11": w11,
    "W12": w12,
    "W7": w7,
    "W8": w8,
}


def plan(workload: str, noop: bool) -> list[str]:
    """The runs that ``--workload workload [--noop]`` means."""
    if noop:
        if workload != "W2":
            raise EmqError("--noop applies to W2 only (--workload W2 --noop)")
        return ["W2-noop"]
    if workload == "all":
        return [
            "W2", "W2-noop", "W3", "W4", "W5", "W6", "W6b", "W9", "W10", "W11", "W12", "W7", "W8",
        ]  # fmt: skip
    if workload not in WORKLOADS:
        raise EmqError(f"unknown workload {workload!r}: one of {', '.join(WORKLOADS)}, all")
    return [workload]


async def run_async(
    runs: list[str],
    duration_s: float,
    competitor: bool = False,
    rtts: Sequence[float] = (),
    table: dict[str, Callable[[Harness, float], Awaitable[dict[str, Any]]]] | None = None,
) -> list[dict[str, Any]]:
    record = any(r in ("W3", "W11", "W12") for r in runs)  # (a log costs the sink: only when read)
    record |= bool(rtts) and "paced" in runs  # (behind a link, paced's quota is judged too)
    table = table or RUNS
    with tempfile.TemporaryDirectory(prefix="emq-bench-dispatch-") as tmp:
        async with Harness.running(Path(tmp), record=record, competitor=competitor) as h:
            results = []
            for rtt in netlink.links(rtts) if rtts else [None]:
                async with h.redis_link(rtt):
                    for name in runs:
                        results.append(await _measured(h, name, duration_s, bool(rtts), table))
            return results


async def _measured(
    h: Harness,
    name: str,
    duration_s: float,
    linked: bool,
    table: dict[str, Callable[[Harness, float], Awaitable[dict[str, Any]]]],
) -> dict[str, Any]:
    """One workload with how busy the machine was; with ``linked``, over which Redis link."""
    contention = Contention(h.sink_pid, h.redis_pid, *h.link_pids().values()).start()
    proxy = CpuMeter(h.link_pids()).start()
    runner = netlink.w2 if linked and name == "W2" else table[name]
    result = await runner(h, duration_s)
    machine = result.pop("machine")
    if linked:
        used = proxy.read()
        result["redis_link"] = {
            "rtt_ms": h.link_rtt_ms,
            "proxy_cpu_s": round(used.get("proxy", 0.0), 2),
            "proxy_cpu_pct_of_core": round(100 * used.get("proxy", 0.0) / used["wall_s"], 1),
        }
    return {**result, "contention": contention.read(), "machine": machine}


def summary(result: dict[str, Any]) -> str:
    """Human-readable lines: per workload, each target with its figure, then a few more."""
    lines = [netlink.summary(result)] if "network" in result else []
    for r in result.get("results", [result]):
        lines.append(f"{r['workload']}:")
        for key, target in r["targets"].items():
            verdict = "ok" if r["pass"][key] else "MISSED"
            lines.append(f"  {key:<28} {r[key]!s:<12} target {target:<10} {verdict}")
        for key in SUMMARY_EXTRA.get(r["workload"], ()):
            value = r
            for part in key.split("."):
                value = value[part]
            lines.append(f"  {key:<28} {value}")
        for c in r.get("cases", []) if r["workload"] == "paced" else []:
            if "error" in c:
                lines.append(f"  {c['topics']:>5} topics x {c['qps']:>3} QPS: {c['error']}")
                continue
            lines.append(
                f"  {c['topics']:>5} topics x {c['qps']:>3} QPS: {c['delivered_per_s']:>8}/s "
                f"{c['worker_cpu_s_per_1000_jobs']:.3f} CPU-s/1000 jobs "
                f"(x{c['cpu_ratio_to_w2']} W2) {c['wakeups_per_s']} wake-ups/s "
                f"{c['redis_commands_per_job']} Redis commands/job"
                + ("" if c["paced"] else " (not paced: saturated)")
            )
        for c in r.get("idle", []) if r["workload"] == "paced" else []:
            if "error" not in c:
                lines.append(
                    f"  {c['topics']:>5} topics idle: {c['worker_cpu_pct_of_core']}% of a core, "
                    f"{c['wakeups_per_s']} wake-ups/s, {c['redis_commands_per_s']} Redis commands/s"
                )
        c = r["contention"]
        lines.append(
            f"  other load: {c['other_processes_pct_of_core']}% of a core "
            f"(machine {c['machine_busy_pct']}% busy, {c['stolen_pct_of_core']}% of a core "
            "stolen by the host)"
        )
    return "\n".join(lines)


def run(
    workload: str = "all",
    *,
    noop: bool = False,
    duration_s: float = 10.0,
    competitor: bool = False,
    redis_rtt_ms: Sequence[float] = (),
    topics: str | None = None,
    quotas: str | None = None,
) -> dict[str, Any]:
    """Run the workloads; one result, or ``{"results": [...]}`` for several. With
    ``redis_rtt_ms``, the worker reaches Redis through a delaying proxy: :mod:`.netlink`.
    ``topics`` and ``quotas`` (``"10,100"``) are the paced workload's cases."""
    runs = netlink.plan(workload, noop) if redis_rtt_ms else plan(workload, noop)
    if duration_s <= 0:
        raise EmqError("--duration-s must be greater than 0")
    if (topics is not None or quotas is not None) and "paced" not in runs:
        raise EmqError(
            "--topics and --quota apply to --workload paced only (or all, with --redis-rtt-ms)"
        )
    default_topics, default_quotas = netlink.PACED if redis_rtt_ms else (TOPICS, QUOTAS)
    table: dict[str, Callable[[Harness, float], Awaitable[dict[str, Any]]]] = {
        **RUNS,
        "paced": functools.partial(
            paced,
            topics=parse_counts(topics, "--topics", MAX_TOPICS) if topics else default_topics,
            quotas=parse_counts(quotas, "--quota", MAX_QUOTA) if quotas else default_quotas,
        ),
    }
    try:
        results = uvloop.run(_main(runs, duration_s, competitor, redis_rtt_ms, table))
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None  # SIGTERM: everything was stopped on the way out
    if redis_rtt_ms:
        return netlink.report(workload, redis_rtt_ms, results)
    if len(results) == 1:
        return results[0]
    return {
        "bench": "dispatch",
        "workload": workload,
        "pass": all(all(r["pass"].values()) for r in results),
        "results": results,
        "machine": describe(),
    }


async def _main(
    runs: list[str],
    duration_s: float,
    competitor: bool,
    rtts: Sequence[float],
    table: dict[str, Callable[[Harness, float], Awaitable[dict[str, Any]]]],
) -> list[dict[str, Any]]:
    """Run, and turn SIGTERM into cancellation so every server is stopped on the way out."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await run_async(runs, duration_s, competitor, rtts, table)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)

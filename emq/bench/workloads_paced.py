"""Workload ``paced`` of ``emq bench dispatch``: what a worker spends while it paces.

A rate-limited scheduler spends most of its life pacing: topics sit at their quota with a
backlog. For each ``N`` topics (``--topics``, default 10,100,1000) at quota ``q`` (``--quota``,
default 10,100), one group each, each topic's medium queue backlogged (enough jobs for the
measured seconds, or for the :data:`MAX_OFFERED_PER_S` a worker could at most deliver when
``N x q`` is more), one worker delivers to the sink. After :data:`WARMUP_S` from the first
delivery, over the measured seconds (``--duration-s``):

* ``delivered_per_s``: arrivals at the sink, against ``offered_per_s`` = ``N x q``;
* ``worker_cpu_s_per_1000_jobs`` (and ``worker_cpu_us_per_job``): the worker's CPU (``/proc``);
* ``wakeups_per_s``: the worker's event-loop thread's context switches per second
  (``/proc/<pid>/status``: voluntary ones are the loop going to sleep and being woken;
  involuntary ones, the machine taking the CPU, reported apart);
* ``redis_commands_per_job``: ``INFO commandstats`` calls over the measured seconds per job,
  with the commands that make them (``redis_commands_by_name``, per job).

For each ``N``, the same worker with nothing to deliver (``idle``): its CPU as % of a core,
wake-ups and Redis commands per second, the upkeep a paced case spreads over its jobs.

Then, in the same run, the saturated W2 worker run (:func:`emq.bench.workloads._w2_worker`):
``w2_worker_cpu_us_per_job``, and per case ``cpu_ratio_to_w2`` (issue 32's target: at most 1.5).
A case is ``paced`` when the worker delivered at least 95 % of what was offered; a case
offering more than the worker can deliver is a saturated run and is reported, not judged.

Behind a link (``--redis-rtt-ms``, :mod:`emq.bench.netlink`, which judges the quota) a case also
has the proxy's ``proxy_cpu_s_per_1000_jobs``, its topics' busiest sliding second and least rate
over the measured seconds as shares of ``q`` (``sliding_max``, ``sustained_min``: the sink
records its arrivals then) and ``worker_runqueue_wait``, how long the worker's loop waited for a
CPU meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from emq.bench.harness import (
    CpuMeter,
    Harness,
    RunQueueWait,
    job_item,
    preload,
    round_robin,
    stopping,
    topic_ref,
)
from emq.bench.workloads import (
    SENDERS,
    _w2_worker,
    judge,
    start_worker,
    topic_specs,
    wait_first_delivery,
)
from emq.bench.workloads_pace import _sliding
from emq.core.errors import EmqError
from emq.core.model import Priority

TOPICS = (10, 100, 1000)
QUOTAS = (10, 100)
WARMUP_S = 2.0
IDLE_SETTLE_S = 2.0  # an idle worker's start before its upkeep is measured
MARGIN_S = 6.0  # backlog beyond the measured seconds: the start and the warm-up
MAX_OFFERED_PER_S = 20_000  # more than one worker process delivers: backlog no more than this
PACED_SHARE = 0.95  # delivered / offered for a case to count as paced
W2_JOBS_PER_S = 15_000  # the saturated reference run's jobs per second of --duration-s
MAX_TOPICS = 10_000
MAX_QUOTA = 150  # one group per topic (max_group_qps)


def parse_counts(text: str, flag: str, most: int) -> list[int]:
    """``"10,100"`` -> ``[10, 100]``: positive integers up to ``most``, or one clear error."""
    try:
        counts = [int(p) for p in text.split(",")]
    except ValueError:
        raise EmqError(f"{flag} takes counts like 10,100, not {text!r}") from None
    if not counts or any(c < 1 or c > most for c in counts):
        raise EmqError(f"{flag} takes counts from 1 to {most}, not {text!r}")
    return counts


def names(count: int) -> list[str]:
    return [f"paced-{i:05d}" for i in range(count)]


def backlog_per_topic(topics: int, qps: int, seconds: float) -> int:
    """Jobs each topic stores: its quota over the run, capped to what a worker could take."""
    rate = min(qps, max(1, MAX_OFFERED_PER_S // topics))
    return int(rate * (seconds + WARMUP_S + MARGIN_S) * 1.1) + 1


def thread_switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of ``pid``'s main thread: its event loop."""
    voluntary = involuntary = 0
    with open(f"/proc/{pid}/task/{pid}/status") as fh:
        for line in fh:
            if line.startswith("voluntary_ctxt_switches:"):
                voluntary = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                involuntary = int(line.split()[1])
    return voluntary, involuntary


async def command_calls(h: Harness) -> dict[str, int]:
    """Redis's ``INFO commandstats``: calls so far per command."""
    info = await h.redis_client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in info.items()}


def calls_between(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Calls per command between two readings (the readings' own INFO calls left out)."""
    out = {k: n - before.get(k, 0) for k, n in after.items()}
    if "info" in out:
        out["info"] -= 1
    return {k: n for k, n in out.items() if n > 0}


def case_figures(
    topics: int,
    qps: int,
    seconds: float,
    delivered: int,
    cpu_s: float,
    switches: tuple[int, int],
    calls: dict[str, int],
) -> dict[str, Any]:
    """One case's figures from what was measured over ``seconds``."""
    if seconds <= 0 or delivered <= 0:
        raise EmqError(f"paced {topics}x{qps}: no delivery measured in {seconds:.1f} s")
    commands = sum(calls.values())
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:8]
    offered = topics * qps
    return {
        "topics": topics,
        "qps": qps,
        "offered_per_s": offered,
        "delivered_per_s": round(delivered / seconds, 1),
        "paced": delivered / seconds >= PACED_SHARE * offered,
        "seconds": round(seconds, 2),
        "delivered": delivered,
        "worker_cpu_s_per_1000_jobs": round(1000 * cpu_s / delivered, 4),
        "worker_cpu_us_per_job": round(1e6 * cpu_s / delivered, 1),
        "worker_cpu_pct_of_core": round(100 * cpu_s / seconds, 1),
        "wakeups_per_s": round(switches[0] / seconds, 1),
        "involuntary_switches_per_s": round(switches[1] / seconds, 1),
        "redis_commands_per_job": round(commands / delivered, 3),
        "redis_commands_by_name": {k: round(n / delivered, 3) for k, n in top},
    }


@dataclass
class Usage:
    """What :func:`measuring` saw of a worker over its block: CPU seconds per process (and
    ``wall_s``), its loop's (voluntary, involuntary) switches, Redis calls per command."""

    cpu: dict[str, float] = field(default_factory=dict)
    switches: tuple[int, int] = (0, 0)
    calls: dict[str, int] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def measuring(
    h: Harness, pid: int, others: dict[str, int] | None = None
) -> AsyncIterator[Usage]:
    """Measure worker ``pid`` (and the ``others``' CPU) over the ``async with`` block."""
    usage = Usage()
    calls = await command_calls(h)
    switches = thread_switches(pid)
    meter = CpuMeter({"worker": pid, **(others or {})}).start()
    yield usage
    usage.cpu = meter.read()
    end = thread_switches(pid)
    usage.switches = (end[0] - switches[0], end[1] - switches[1])
    usage.calls = calls_between(calls, await command_calls(h))


async def paced_case(h: Harness, topics: int, qps: int, seconds: float) -> dict[str, Any]:
    """One worker paces ``topics`` topics at ``qps`` each; its figures over ``seconds``."""
    backend = await h.fresh(f"paced-{topics}-{qps}")
    topic_names = names(topics)
    queues = [topic_ref(t).group(0).queue(Priority.MEDIUM) for t in topic_names]
    url = f"{h.sink_base}/t/"
    per_topic = backlog_per_topic(topics, qps, seconds)
    items = (job_item(q, url + q.group.topic.topic) for q in round_robin(queues, per_topic))
    await preload(backend, items)
    worker = await start_worker(h, "paced", {"topics": topic_specs(topic_names, qps)})
    with stopping(worker):
        worker.load_topics()
        first = await wait_first_delivery(h)
        # (a short run, a short warm-up: the smoke test's)
        await asyncio.sleep(max(0.0, first + min(WARMUP_S, seconds) - time.time()))
        arrived = (await h.sink_call("/_stats"))["requests"]
        async with measuring(h, worker.pid, h.link_pids()) as used:
            waited = RunQueueWait(worker.pid).start() if h.record else None
            began = time.time()
            await asyncio.sleep(seconds)
        arrived_end = (await h.sink_call("/_stats"))["requests"]
    figures = case_figures(
        topics,
        qps,
        used.cpu["wall_s"],
        arrived_end - arrived,
        used.cpu["worker"],
        used.switches,
        used.calls,
    )
    if "proxy" in used.cpu:  # Redis behind emq.rigs.netdelay (emq.bench.netlink): its CPU apart
        proxy = used.cpu["proxy"]
        figures["proxy_cpu_s_per_1000_jobs"] = round(1000 * proxy / figures["delivered"], 4)
    if waited is not None:  # the quota per topic from the sink's arrival stamps, and how long
        # the worker's loop waited for a CPU meanwhile (a busy machine's part in a short rate)
        figures |= await _sliding(h, topic_names, qps, began, used.cpu["wall_s"])
        figures["worker_runqueue_wait"] = waited.read()
    return figures


def idle_figures(
    topics: int, seconds: float, cpu_s: float, switches: tuple[int, int], calls: dict[str, int]
) -> dict[str, Any]:
    """An idle worker's upkeep over ``seconds``: what it spends per second whatever its rate."""
    if seconds <= 0:
        raise EmqError(f"idle {topics}: nothing measured")
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:8]
    return {
        "topics": topics,
        "seconds": round(seconds, 2),
        "worker_cpu_pct_of_core": round(100 * cpu_s / seconds, 2),
        "wakeups_per_s": round(switches[0] / seconds, 1),
        "redis_commands_per_s": round(sum(calls.values()) / seconds, 1),
        "redis_commands_by_name": {k: round(n / seconds, 1) for k, n in top},
    }


async def idle_case(h: Harness, topics: int, qps: int, seconds: float) -> dict[str, Any]:
    """One worker owning ``topics`` topics (one group each) with nothing to deliver: its upkeep
    (hold checks, checkpoints, history, the looks at its due index) over ``seconds``."""
    await h.fresh(f"idle-{topics}")
    worker = await start_worker(h, "idle", {"topics": topic_specs(names(topics), qps)})
    with stopping(worker):
        worker.load_topics()
        await asyncio.sleep(IDLE_SETTLE_S)  # (claims, first reads and looks done)
        async with measuring(h, worker.pid) as used:
            await asyncio.sleep(seconds)
    return idle_figures(topics, used.cpu["wall_s"], used.cpu["worker"], used.switches, used.calls)


async def paced(
    h: Harness, duration_s: float, topics: Sequence[int] = TOPICS, quotas: Sequence[int] = QUOTAS
) -> dict[str, Any]:
    seconds = max(1.0, duration_s)
    cases = []
    for n in topics:
        for q in quotas:
            try:
                cases.append(await paced_case(h, n, q, seconds))
            except EmqError as e:  # (the others still run; this one says what went wrong)
                cases.append({"topics": n, "qps": q, "paced": False, "error": str(e)})
    idle = []
    for n in topics:  # the same workers with nothing to do: the floor under a paced case
        try:
            idle.append(await idle_case(h, n, min(quotas), seconds))
        except EmqError as e:
            idle.append({"topics": n, "error": str(e)})
    measured = [c for c in cases if "error" not in c]
    if not measured:
        raise EmqError(f"no paced case was measured: {cases[0]['error']}")
    w2 = await _w2_worker(h, int(W2_JOBS_PER_S * max(0.1, duration_s)), SENDERS)
    reference = w2["worker_cpu_us_per_job"]
    for case in measured:
        case["cpu_ratio_to_w2"] = round(case["worker_cpu_us_per_job"] / reference, 3)
    # The worst paced case's CPU per job over the saturated run's (of every case if none paced).
    judged = [c["cpu_ratio_to_w2"] for c in measured if c["paced"]] or [
        c["cpu_ratio_to_w2"] for c in measured
    ]
    return judge(
        "paced",
        {
            "cpu_ratio_to_w2": max(judged),
            "w2_worker_cpu_us_per_job": reference,
            "w2_jobs_per_s": w2["jobs_per_s"],
            "cases": cases,
            "idle": idle,
            "w2": {k: w2[k] for k in ("jobs", "jobs_per_s", "seconds", "worker_cpu_us_per_job")},
        },
    )

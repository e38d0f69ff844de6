"""``emq bench peers --workload paced``: EMQ against BullMQ while pacing (issue 32).

Ten tenants, one topic (EMQ) or queue (BullMQ) each, each at a quota of :data:`QPS` jobs a
second (EMQ: the topic's quota, one group; BullMQ: its Worker's ``limiter``, ``max`` 100 per
1000 ms), every one backlogged and one flooding (:data:`FLOOD` times the others' backlog), each
job a POST of a 200-byte JSON body to the one sink process, as in :mod:`emq.bench.peers`. Both
deliver ``TENANTS x QPS`` jobs a second, so what is compared is what each spends doing it:
from :data:`WARMUP_S` after the first delivery, over the measured seconds, the process's CPU
(``/proc``) per 1000 jobs that reached the sink meanwhile, and the delivered rate.

The sides take turns (EMQ, BullMQ with undici's ``request()``, BullMQ with ``fetch``, EMQ), on
one Redis and one sink; each side's leanest run counts (``emq_over_bullmq_cpu``: EMQ's CPU per
job over BullMQ's, issue 32's target below 1).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

from emq.bench.harness import HEADERS, CpuMeter, Harness, preload, stopping
from emq.bench.machine import describe
from emq.bench.peers import BODY, CACHE, TENANTS, _node, run_both, take_turns
from emq.bench.workloads import start_worker, wait_first_delivery
from emq.core.errors import EmqError
from emq.core.interfaces import PutItem
from emq.core.job import Job
from emq.core.model import Envelope, Namespace, Priority, TopicRef

QPS = 100
FLOOD = 10  # the flooding tenant's backlog over the others'
WARMUP_S = 2.0
MARGIN_S = 8.0  # backlog beyond the measured seconds: the start and the warm-up
BULLMQ_RUNS = (("undici", 8), ("fetch", 8))


def backlogs(seconds: float) -> tuple[int, int]:
    """(jobs of each tenant, jobs of the flooding one) for a measured stretch of ``seconds``."""
    each = int(QPS * (seconds + WARMUP_S + MARGIN_S) * 1.2)
    return each, each * FLOOD


def tenant(i: int) -> str:
    return f"peers{i}"


def _items(h: Harness, each: int, flood: int) -> Iterable[PutItem]:
    refs = [TopicRef(Namespace.ONLINE, tenant(i), "push") for i in range(TENANTS)]
    stamp = int(time.time() * 1000)
    for n in range(flood):
        for i, ref in enumerate(refs):
            if i and n >= each:
                continue  # peers0 floods; the others have their backlog
            job_id = f"msg_paced{i:02d}{n:019d}"
            job = Job(url=f"{h.sink_base}/t/peers-{i}", headers=dict(HEADERS), body=BODY)
            yield PutItem(
                ref.group(0).queue(Priority.MEDIUM), job_id, Envelope(job_id, job, stamp).encode()
            )


def paced_figures(delivered: int, seconds: float, cpu_s: float) -> dict[str, Any]:
    """A side's figures over the measured stretch."""
    if delivered <= 0 or seconds <= 0:
        raise EmqError(f"nothing delivered in the measured {seconds:.1f} s")
    return {
        "delivered": delivered,
        "seconds": round(seconds, 2),
        "delivered_per_s": round(delivered / seconds, 1),
        "offered_per_s": TENANTS * QPS,
        "cpu_s": round(cpu_s, 3),
        "cpu_s_per_1000_jobs": round(1000 * cpu_s / delivered, 4),
        "cpu_pct_of_core": round(100 * cpu_s / seconds, 1),
    }


async def _measure(h: Harness, pid: int, seconds: float) -> dict[str, Any]:
    """From WARMUP_S after the first delivery, ``seconds`` of ``pid``'s CPU and deliveries."""
    first = await wait_first_delivery(h)
    await asyncio.sleep(max(0.0, first + WARMUP_S - time.time()))
    before = (await h.sink_call("/_stats"))["requests"]
    meter = CpuMeter({"side": pid, "redis": h.redis_pid}).start()
    await asyncio.sleep(seconds)
    used = meter.read()
    delivered = (await h.sink_call("/_stats"))["requests"] - before
    figures = paced_figures(delivered, used["wall_s"], used["side"])
    figures["redis_cpu_s_per_1000_jobs"] = round(1000 * used["redis"] / max(1, delivered), 4)
    return figures


async def emq_paced(h: Harness, seconds: float) -> dict[str, Any]:
    backend = await h.fresh("peers-paced")
    each, flood = backlogs(seconds)
    await preload(backend, _items(h, each, flood))
    topics = [
        {"tenant": tenant(i), "topic": "push", "qps": QPS, "groups": 1} for i in range(TENANTS)
    ]
    worker = await start_worker(h, "peers-paced-emq", {"topics": topics})
    with stopping(worker):
        worker.load_topics()
        return await _measure(h, worker.pid, seconds)


async def bullmq_paced(h: Harness, seconds: float, client: str, concurrency: int) -> dict[str, Any]:
    await h.redis_client.flushall()
    await h.sink_call("/_reset")
    redis_url = f"redis://{h.redis.address}/1"
    each, flood = backlogs(seconds)
    loader = await _node("load", str(CACHE), redis_url, str(TENANTS), str(each), h.sink_base,
                         BODY, str(flood))  # fmt: skip
    _, err = await asyncio.wait_for(loader.communicate(), 300)
    if loader.returncode != 0:
        raise EmqError(f"BullMQ's loader exited {loader.returncode}: {err.decode()[-500:]}")
    proc = await _node("work", str(CACHE), redis_url, str(TENANTS), str(concurrency), client,
                       str(QPS), stdin=asyncio.subprocess.PIPE)  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if line.strip() != b"ready":
            err = await proc.stderr.read()
            raise EmqError(f"BullMQ's worker did not start: {err.decode()[-500:]}")
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        figures = await _measure(h, proc.pid, seconds)
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    return {**figures, "client": client, "concurrency_per_worker": concurrency}


def leanest(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        raise EmqError("no run succeeded")
    return min(ok, key=lambda r: r["cpu_s_per_1000_jobs"])


async def _both(duration_s: float, say: Callable[[str], None]) -> dict[str, Any]:
    seconds = max(1.0, duration_s)
    doc: dict[str, Any] = {"bench": "peers", "workload": "paced", "tenants": TENANTS,
                           "qps": QPS, "flood": FLOOD, "seconds": seconds}  # fmt: skip
    emq_runs, bull_runs = await take_turns(
        doc,
        lambda h: emq_paced(h, seconds),
        lambda h, client, c: bullmq_paced(h, seconds, client, c),
        BULLMQ_RUNS,
        "cpu_s_per_1000_jobs",
        say,
    )
    doc["emq"] = leanest(emq_runs)
    doc["emq_runs"] = emq_runs
    doc["bullmq_runs"] = bull_runs
    if any("error" not in r for r in bull_runs):
        doc["bullmq"] = leanest(bull_runs)
        ratio = doc["emq"]["cpu_s_per_1000_jobs"] / doc["bullmq"]["cpu_s_per_1000_jobs"]
        doc["emq_over_bullmq_cpu"] = round(ratio, 3)
        doc["target"] = "< 1"
        doc["pass"] = ratio < 1
    doc["machine"] = describe()
    return doc


def run(duration_s: float, say: Callable[[str], None]) -> dict[str, Any]:
    return run_both(_both, duration_s, say)


def summary(doc: dict[str, Any]) -> str:
    lines = [f"paced: {doc['tenants']} tenants at {doc['qps']} QPS, one flooding x{doc['flood']}"]
    rows = [("EMQ", doc["emq"])]
    if "bullmq" in doc:
        b = doc["bullmq"]
        rows.append((f"BullMQ {doc['npm_versions']['bullmq']} ({b['client']})", b))
    for name, r in rows:
        lines.append(
            f"{name:<24} {r['delivered_per_s']:>8} jobs/s  {r['cpu_s_per_1000_jobs']:.3f} "
            f"CPU-s/1000 jobs  (Redis {r['redis_cpu_s_per_1000_jobs']})"
        )
    if "emq_over_bullmq_cpu" in doc:
        verdict = "pass" if doc["pass"] else "FAIL"
        lines.append(
            f"EMQ/BullMQ CPU per job {doc['emq_over_bullmq_cpu']} ({doc['target']}: {verdict})"
        )
    else:
        lines.append(f"BullMQ not measured: {doc.get('bullmq_error', 'every run failed')}")
    return "\n".join(lines)

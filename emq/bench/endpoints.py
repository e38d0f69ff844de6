"""``emq bench endpoints``: the adaptive per-endpoint rate against a rate-limited receiver.

Issue 16's target: a topic of quota 100 whose jobs go to two endpoints (two sink processes: an
endpoint is a ``host:port``); the first answers 429 above 60 requests in any second (the sink's
``/limit/60/a``, no ``Retry-After``), the second always 200. Three quarters of the backlog goes
to the first, so at the full quota it would be sent 75/s. Within 10 s the first must receive at
most 66 requests in every wall-clock second and every sliding 1 s window (429s included), 429s
must be under 5 % of its requests, no job may reach the DLQ, and the second endpoint must keep
its share (a quarter of the quota: at least 95 % of 25/s while it has jobs). Issue 26 adds: the
first must be delivered at least 85 % of its limit, and the whole run is made twice, the second
time with the 429s carrying ``Retry-After: 1`` (``with_retry_after`` in the document): a hold
that must not cost the endpoint its rate.

Real parts on loopback (:class:`emq.bench.rig.Rig`: Redis, ZooKeeper, a standalone ``emq
worker`` process); the figures come from what the sinks logged, per wall-clock second and per
sliding window.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emq.api.enqueue import Enqueuer
from emq.bench.machine import describe
from emq.bench.promises import Delivery, parse_log
from emq.bench.rig import SECRET, Rig
from emq.core.endpoints import EndpointPolicy
from emq.core.model import RetryPolicy, Topic
from emq.rigs.procs import SinkProcess
from emq.stack import free_port

QPS = 100
LIMIT = 60  # the first endpoint's requests per second
TARGET = 66  # ... what it may receive after SETTLE_S
SETTLE_S = 10.0
MAX_429_SHARE = 0.05
MIN_LIMIT_SHARE = 0.85  # the first endpoint's delivered rate, of its limit, after SETTLE_S
SHARE = 0.25  # the second endpoint's part of the backlog (and of the quota)


def _per_second(rows: Sequence[Delivery]) -> Counter[int]:
    return Counter(int(d.at) for d in rows)


def _max_window(times: Sequence[float]) -> tuple[int, float]:
    """The most arrivals in any sliding 1 s window, and when that window started."""
    times = sorted(times)
    most, start, at = 0, 0, 0.0
    for end, t in enumerate(times):
        while t - times[start] >= 1.0:
            start += 1
        if end - start + 1 > most:
            most, at = end - start + 1, times[start]
    return most, at


def judge(first: Sequence[Delivery], second: Sequence[Delivery], dead: int) -> dict[str, Any]:
    """The figures and the verdict from both sinks' logs (pure: the tests feed it too)."""
    t0 = min(d.at for d in (*first, *second))
    settled = [d for d in first if d.at >= t0 + SETTLE_S]
    seconds = _per_second(settled)
    whole = sorted(seconds)[1:-1]  # (the first and last seconds are partial)
    throttled = sum(1 for d in settled if d.status == 429)
    window, window_at = _max_window([d.at for d in settled])
    b_ok = sorted(d.at for d in second if d.status == 200)
    b_whole = sorted(_per_second([d for d in second if d.status == 200]))[1:-1]
    b_rate = (len(b_ok) - 1) / (b_ok[-1] - b_ok[0]) if len(b_ok) > 1 else 0.0
    out: dict[str, Any] = {
        "first_max_requests_per_s": max((seconds[s] for s in whole), default=0),
        "first_max_requests_per_sliding_s": window,
        "first_max_window_at_s": round(window_at - t0, 3),
        "first_max_window_429s": sum(
            1 for d in settled if window_at <= d.at < window_at + 1 and d.status == 429
        ),
        "first_delivered_per_s": round(
            sum(1 for d in settled if d.status == 200) / max(1, len(whole) + 1), 1
        ),
        "first_429_share_after_settle": round(throttled / max(1, len(settled)), 4),
        "first_429_share_overall": round(
            sum(1 for d in first if d.status == 429) / max(1, len(first)), 4
        ),
        "second_delivered_per_s": round(b_rate, 1),
        "second_min_whole_second": min((_per_second(second)[s] for s in b_whole), default=0),
        "dead_lettered": dead,
    }
    out["first_delivered_share_of_limit"] = round(out["first_delivered_per_s"] / LIMIT, 3)
    out["met"] = {
        "first_at_most_66_per_s": out["first_max_requests_per_sliding_s"] <= TARGET,
        "first_at_least_85_percent_of_its_limit": (
            out["first_delivered_share_of_limit"] >= MIN_LIMIT_SHARE
        ),
        "429_under_5_percent": out["first_429_share_after_settle"] < MAX_429_SHARE,
        "no_dlq": dead == 0,
        "second_keeps_its_share": b_rate >= 0.95 * SHARE * QPS,
    }
    out["pass"] = all(out["met"].values())
    return out


async def _run(tmp: Path, duration_s: float, retry_after: bool = False) -> dict[str, Any]:
    async with Rig.running(tmp) as rig:
        second = SinkProcess(free_port(), tmp / "sink2.log", record=True)
        await second.start()
        try:
            policy = EndpointPolicy(adaptive=True)
            topic = Topic(rig.ref("adaptive"), QPS, 1, RetryPolicy(), secret=SECRET,
                          endpoints=policy)  # fmt: skip
            await rig.config.create_topic(topic)
            rig.adopt(topic)
            first_url = rig.url("a", f"limit/{LIMIT}", "ra=1" if retry_after else "")
            every = round(1 / SHARE)
            total = int(QPS * (duration_s + 5))
            jobs = [
                {"url": f"{second.base}/t/b" if i % every == 0 else first_url} for i in range(total)
            ]
            enqueuer = Enqueuer(rig.config, rig.queues)
            for start in range(0, total, 1000):
                await enqueuer.enqueue(topic.ref, jobs[start : start + 1000], batch=True)
            rig.worker("w1", standalone=True)
            await asyncio.sleep(duration_s)
            first = [d for d in await rig.deliveries() if d.topic == "a"]
            page = await second.get("/_log?from=0")
            dead = len(await rig.dead_ids())
        finally:
            await second.stop()
    return judge(first, parse_log(page["log"]), dead)


def run(duration_s: float = 30.0) -> dict[str, Any]:
    """Run the benchmark (``duration_s`` of the worker delivering) and return its figures."""
    with tempfile.TemporaryDirectory(prefix="emq-bench-endpoints-") as tmp:
        result = asyncio.run(_run(Path(tmp), duration_s))
    with tempfile.TemporaryDirectory(prefix="emq-bench-endpoints-ra-") as tmp:
        held = asyncio.run(_run(Path(tmp), duration_s, retry_after=True))
    return {
        "benchmark": "endpoints",
        "target": {
            "quota": QPS,
            "first_endpoint_limit_per_s": LIMIT,
            "first_at_most_per_s": TARGET,
            "within_s": SETTLE_S,
            "max_429_share": MAX_429_SHARE,
            "second_share_per_s": SHARE * QPS,
            "first_min_share_of_limit": MIN_LIMIT_SHARE,
        },
        "duration_s": duration_s,
        **result,
        "with_retry_after": held,
        "pass": result["pass"] and held["pass"],
        "machine": describe(),
    }


def summary(result: dict[str, Any]) -> str:
    lines = [_summary(result, "")]
    if "with_retry_after" in result:
        lines.append(_summary(result["with_retry_after"], " with Retry-After: 1"))
    return "\n".join(lines)


def _summary(result: dict[str, Any], variant: str) -> str:
    met = ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in result["met"].items())
    return (
        f"first endpoint (429{variant} above {LIMIT}/s): at most "
        f"{result['first_max_requests_per_sliding_s']} requests in a sliding second after "
        f"{SETTLE_S:g} s, {result['first_delivered_per_s']}/s delivered, 429s "
        f"{result['first_429_share_after_settle']:.1%}; second endpoint "
        f"{result['second_delivered_per_s']}/s; dead-lettered {result['dead_lettered']}\n{met}"
    )

"""``emq bench tenant-quota``: a tenant's cap shared by its topics across a fleet (issue 16).

The target: tenant cap 300, three backlogged topics of quota 200 each (two groups each, spread
over two ``emq worker`` fleet processes): each gets about 100/s, the tenant's total stays at or
under 1.05 x 300 in every wall-clock second, and when one topic drains the other two rise to
150/s each within 2 s. Everything is judged from the sink's delivery log (the real parts on
loopback: Redis, ZooKeeper, the recording sink, :class:`emq.bench.rig.Rig`).
"""

from __future__ import annotations

import asyncio
import bisect
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from emq.api.tenants import with_cap
from emq.bench.machine import describe
from emq.bench.promises import Delivery, busiest_window_at
from emq.bench.rig import TENANT, Rig
from emq.core.model import Namespace
from emq.core.naming import RedisKeys

CAP, QPS = 300, 200
TOPICS = ("ta", "tb", "tc")  # tc drains first
RISE_S = 2.0
AFTER_S = 6.0  # measured after the drain


async def run(duration_s: float = 10.0, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the workload (``duration_s``: seconds with all three backlogged); the figures."""
    with tempfile.TemporaryDirectory(prefix="emq-bench-tq-") as tmp:
        async with Rig.running(Path(tmp)) as rig:
            return await _run(rig, duration_s, say)


async def _run(rig: Rig, duration_s: float, say: Callable[[str], None]) -> dict[str, Any]:
    await rig.config.update_tenant(TENANT, lambda t: with_cap(Namespace.ONLINE, CAP, t))
    for name in TOPICS:
        await rig.topic(name, QPS)
    workers = [rig.worker(f"w{i}", EMQ_WORKER_SHUTDOWN_GRACE_S="0.5") for i in range(2)]
    await _both_publish(rig, workers)
    say("two workers own the tenant's groups; enqueueing")
    share = CAP // len(TOPICS)
    for name in TOPICS[:2]:
        await rig.enqueue(name, int(share * duration_s + CAP / 2 * (AFTER_S + 4)))
    drain_ids = set(await rig.enqueue(TOPICS[2], int(share * duration_s)))
    await rig.wait_delivered(drain_ids, duration_s * 3 + 30)
    log = await rig.deliveries()
    drained = max(d.at for d in log if d.topic == TOPICS[2])
    while time.time() < drained + AFTER_S + 1:
        await asyncio.sleep(0.25)
    return figures(await rig.deliveries(), drained)


async def _both_publish(rig: Rig, workers: Sequence[Any]) -> None:
    """Until both workers publish the tenant's demand (both own groups of it)."""
    keys = RedisKeys(rig.settings.redis_key_prefix)
    key = keys.tenant_demand(Namespace.ONLINE, TENANT)
    client = aioredis.Redis.from_url(rig.settings.redis_url)
    try:
        deadline = time.monotonic() + 60
        while await client.hlen(key) < len(workers):
            if time.monotonic() > deadline:
                raise RuntimeError("the workers did not both own the tenant's groups in 60 s")
            await asyncio.sleep(0.1)
    finally:
        await client.aclose()


def figures(log: Sequence[Delivery], drained: float) -> dict[str, Any]:
    """The figures and the verdict from the sink's log; ``drained``: the last delivery of the
    topic that drains."""
    log = [d for d in log if d.topic in TOPICS]
    start = min(d.at for d in log)
    per = {n: Counter(int(d.at) for d in log if d.topic == n) for n in TOPICS}
    total = Counter(int(d.at) for d in log)
    full = sorted(total)[1:-1]
    shared = [s for s in full if start + 2 <= s and s + 1 <= drained]  # after settling
    after = [s for s in full if s >= drained]
    shared_rates = {n: _mean([per[n][s] for s in shared]) for n in TOPICS}
    rise = _rise_s(log, drained)
    worst = max(total[s] for s in full)
    window, at = busiest_window_at(sorted(d.at for d in log))
    result: dict[str, Any] = {
        "cap": CAP,
        "topic_qps": QPS,
        "tenant_busiest_second": worst,
        "tenant_busiest_window": window,
        # (from the drain; a sink process starved of CPU stamps queued requests together)
        "tenant_busiest_window_from_drain_s": None if at is None else round(at - drained, 2),
        "per_topic_while_shared": shared_rates,
        "per_second_while_shared": {n: [per[n][s] for s in shared] for n in TOPICS},
        "per_second_after_drain": {n: [per[n][s] for s in after] for n in TOPICS[:2]},
        "rise_s": rise,
        "mean_after_rise": {
            n: _mean([per[n][s] for s in after if rise is not None and s - drained >= rise])
            for n in TOPICS[:2]
        },
    }
    result["target"] = {
        "tenant_busiest_second_max": 1.05 * CAP,
        "per_topic_while_shared": f"{CAP // 3} +-5%",
        "rise_to": CAP / 2 * 0.95,
        "rise_s_max": RISE_S,
    }
    result["met"] = {
        "tenant_cap": worst <= 1.05 * CAP,
        "equal_shares": all(abs(r - CAP / 3) <= CAP / 3 * 0.05 for r in shared_rates.values()),
        "rise": rise is not None and rise <= RISE_S,
    }
    result["ok"] = all(result["met"].values())
    result["machine"] = describe()
    return result


def _rise_s(log: Sequence[Delivery], drained: float) -> float | None:
    """From the drain to the start of the first 1 s window (sliding: from any arrival on) in
    which both other topics got 95 % of their new share (None: never)."""
    times = {n: sorted(d.at for d in log if d.topic == n) for n in TOPICS[:2]}
    need = CAP / 2 * 0.95
    for t in sorted(t for ts in times.values() for t in ts if t >= drained):
        counts = [
            bisect.bisect_left(ts, t + 1) - bisect.bisect_left(ts, t) for ts in times.values()
        ]
        if min(counts) >= need:
            return round(t - drained, 2)
    return None


def _mean(values: list[int]) -> float:
    return round(sum(values) / len(values), 1) if values else 0.0


def summary(result: dict[str, Any]) -> str:
    rows = [
        f"tenant cap {CAP}: busiest second {result['tenant_busiest_second']} "
        f"(<= {1.05 * CAP:g}), busiest sliding window {result['tenant_busiest_window']}",
        f"while shared: {result['per_topic_while_shared']} /s (target {CAP // 3} each)",
        f"after one drained: the others at {CAP // 2 * 0.95:g}/s+ after {result['rise_s']} s "
        f"(target <= {RISE_S:g} s)",
        f"met: {result['met']}",
    ]
    return "\n".join(rows)

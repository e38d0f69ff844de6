"""The ``cluster_failover`` fault trial: Redis Cluster masters killed under load.

On a :class:`~emq.bench.cluster_rig.ClusterRig` (three masters, a replica each), ``topics``
topics of one group each are spread evenly over the three shards (each topic's group sits on
one slot, so on one shard), backlogged for the whole run and delivered by a fleet of
``workers``; the API takes a steady trickle of single-job enqueues to every topic meanwhile
(each with an idempotency key, retried with the same key after a 503, as a client should).
Then ``kills`` masters of different shards (seeded choice) get ``SIGKILL``, ``between_s``
apart, and each replica's promotion is timed.

What it reports, against the targets of issue 26 item 2:

* ``lost`` (0) and duplicates: on shards never killed (0: no worker crashed) and on killed
  shards (at most one checkpoint interval of their topics' quota per kill: Redis replicates
  asynchronously, so a checkpoint written just before the kill may be missing on the replica);
* per shard, the longest delivery gap of its topics around each kill: a killed shard's pause
  at most Redis's own failover time + 2 s, a healthy shard's at most 1 s;
* the API's answers: 5xx counts by status and error code (503, never 500), and the slowest
  enqueue to a healthy shard during a failover;
* processes alive (workers and API), and workers whose ready-signal listener paused without
  resuming.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from emq.bench import promises
from emq.bench.cluster_rig import ClusterRig, Node
from emq.bench.faults import _alive, _flowing, _settle, _verdict
from emq.bench.rig import ADMIN_TOKEN, BODY, TENANT, Proc, Rig
from emq.core.errors import EmqError
from emq.core.model import Priority
from emq.core.naming import RedisKeys, hash_tag

CHECKPOINT_S = 1.0  # the worker's checkpoint interval: the duplicate bound's unit
HEALTHY_PAUSE_S = 1.0  # the longest gap a shard that lost nothing may show during a failover
EXCESS_S = 2.0  # a killed shard's pause beyond Redis's own failover time
LISTENER = "ready-signal listener"


@dataclass
class Kill:
    shard: int  # index into the masters at the start
    at: float  # wall time of the SIGKILL
    failover_s: float | None  # until a replica served the shard's slots


@dataclass
class Call:
    topic: str
    at: float
    latency_s: float
    status: int
    code: str


def _slot(key: str) -> int:
    from redis.crc import key_slot  # (bench only: where the Cluster puts a key)

    return int(key_slot(hash_tag(key).encode()))


def spread(rig: Rig, masters: Sequence[Node], topics: int, prefix: str = "c") -> dict[str, int]:
    """``topics`` names, each mapped to the index of the master whose slots hold its group 0,
    as evenly over the masters as names allow."""
    keys = RedisKeys(rig.settings.redis_key_prefix)
    per = math.ceil(topics / len(masters))
    out: dict[str, int] = {}
    count = Counter[int]()
    for i in range(topics * 50):
        name = f"{prefix}{i}"
        slot = _slot(keys.stream(rig.ref(name).group(0).queue(Priority.MEDIUM)))
        shard = next(k for k, m in enumerate(masters) if m.serves(slot))
        if count[shard] < per:
            out[name] = shard
            count[shard] += 1
        if len(out) == topics:
            break
    return out


async def _poster(
    http: aiohttp.ClientSession, rig: Rig, base: str, topic: str, every_s: float,
    calls: list[Call], stop: asyncio.Event,
) -> None:  # fmt: skip
    """Enqueue one job every ``every_s`` until ``stop``; after a failed answer, the same job
    again with its idempotency key (a 503 may have stored it) until it is accepted."""
    url = f"{base}/v1/tenants/{TENANT}/topics/{topic}/jobs"
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    n = 0
    while not stop.is_set():
        n += 1
        job = {"url": rig.url(topic), "body": BODY, "idempotency_key": f"{topic}-{n}"}
        while True:
            started = time.time()
            status, answer = 0, None
            try:
                async with http.post(url, json=job, headers=headers) as r:
                    status, answer = r.status, await r.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError, ValueError):
                pass
            code = answer.get("error", {}).get("code", "") if isinstance(answer, dict) else ""
            calls.append(Call(topic, started, time.time() - started, status, code))
            if status == 202 and isinstance(answer, dict):
                rig.accepted.update(answer["ids"])
                break
            await asyncio.sleep(0.25)
        await asyncio.sleep(every_s)


def _gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest gap in ``[start, end]``, the end cut at the last arrival (a drained backlog
    is not a pause)."""
    if times:
        end = min(end, max(times[-1], start))
    return promises.longest_gap(times, start, end)


def _pauses(
    log: Sequence[promises.Delivery], shard_of: dict[str, int], kills: Sequence[Kill]
) -> tuple[list[float | None], list[float]]:
    """Per kill: the killed shard's longest gap beyond the failover time, and the healthy
    shards' longest gap, both from the kill to the failover + 5 s."""
    by_topic = promises.by_topic(log)
    excess: list[float | None] = []
    healthy: list[float] = []
    for k in kills:
        end = k.at + (k.failover_s if k.failover_s is not None else 30.0) + 5.0
        gaps = {n: _gap(by_topic.get(n, []), k.at - 0.5, end) for n in shard_of}
        killed = [g for n, g in gaps.items() if shard_of[n] == k.shard]
        others = [g for n, g in gaps.items() if shard_of[n] != k.shard]
        excess.append(
            None if k.failover_s is None or not killed else round(max(killed) - k.failover_s, 2)
        )
        healthy.append(round(max(others, default=0.0), 2))
    return excess, healthy


def _duplicates(log: Sequence[promises.Delivery], topics: set[str]) -> int:
    ok = Counter(d.job_id for d in log if d.ok and d.topic in topics)
    return sum(n - 1 for n in ok.values() if n > 1)


def _repeats(log: Sequence[promises.Delivery], kills: Sequence[Kill]) -> dict[str, Any]:
    """How long after its first 2xx each duplicate came (the cause's fingerprint: a fixed
    period points at a timer), the duplicates per topic, and when (seconds after the last kill
    before it, rounded down) their first deliveries were."""
    first: dict[str, float] = {}
    gaps: list[float] = []
    topics = Counter[str]()
    since = Counter[int]()
    for d in sorted((d for d in log if d.ok), key=lambda d: d.at):
        if d.job_id in first:
            gaps.append(d.at - first[d.job_id])
            topics[d.topic] += 1
            before = [k.at for k in kills if k.at <= first[d.job_id]]
            since[int(first[d.job_id] - before[-1]) if before else -1] += 1
        else:
            first[d.job_id] = d.at
    gaps.sort()
    pick = (lambda q: round(gaps[min(len(gaps) - 1, int(q * len(gaps)))], 2)) if gaps else None
    return {
        "repeat_after_s": None if pick is None else {q: pick(f) for q, f in QUANTILES},
        "by_topic": dict(sorted(topics.items())),
        "first_s_after_kill": dict(sorted(since.items())),
    }


QUANTILES = (("min", 0.0), ("p50", 0.5), ("p90", 0.9), ("max", 1.0))


def _slowest_healthy(
    calls: Sequence[Call], shard_of: dict[str, int], kills: Sequence[Kill]
) -> float:
    worst = 0.0
    for k in kills:
        end = k.at + (k.failover_s if k.failover_s is not None else 30.0) + 2.0
        for c in calls:
            if shard_of.get(c.topic) != k.shard and k.at <= c.at <= end:
                worst = max(worst, c.latency_s)
    return round(worst, 2)


def _unresumed(procs: Sequence[Proc]) -> int:
    """Workers whose ready-signal listener logged a pause and no resume after it."""
    return sum(
        1 for p in procs if p.log_count(f"{LISTENER} paused") > p.log_count(f"{LISTENER} resumed")
    )


async def cluster_failover(
    rig: Rig, workers: int = 3, topics: int = 10, qps: int = 80, kills: int = 2,
    between_s: float = 30.0, tail_s: float = 15.0, api_per_s: float = 20.0, seed: int = 1,
    backlog_s: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``backlog_s``: seconds of each topic's quota enqueued before the start (by default it
    outlasts the kills and the tail)."""
    if not isinstance(rig, ClusterRig):
        raise EmqError("cluster_failover runs on a ClusterRig")
    masters = rig.cluster.masters()
    if not 1 <= kills < len(masters) + 1:
        raise EmqError(f"kills must be 1-{len(masters)}")
    shard_of = spread(rig, masters, topics)
    load_s = backlog_s if backlog_s is not None else kills * between_s + tail_s + 15
    for name in shard_of:
        await rig.topic(name, qps)
        await rig.enqueue(name, int(qps * load_s))
    base = await rig.api()
    api = rig.procs[-1]
    fleet = [rig.worker(f"w{i}") for i in range(workers)]
    await _flowing(rig, list(shard_of))
    await asyncio.sleep(3.0)
    calls: list[Call] = []
    done: list[Kill] = []
    stop = asyncio.Event()
    rng = random.Random(seed)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        every_s = len(shard_of) / api_per_s
        posters = [
            asyncio.create_task(_poster(http, rig, base, n, every_s, calls, stop)) for n in shard_of
        ]
        shards = list(range(len(masters)))
        for k in range(kills):
            if k:
                await asyncio.sleep(between_s)
            shard = shards.pop(rng.randrange(len(shards)))
            slot = masters[shard].slots[0][0]
            master = next(n for n in rig.cluster.masters() if n.serves(slot))
            rig.cluster.kill(master)
            at = time.time()
            failover = await asyncio.to_thread(rig.cluster.promoted_within, master, 60.0)
            done.append(Kill(shard, at, None if failover is None else round(failover, 2)))
        await asyncio.sleep(tail_s)
        stop.set()
        await asyncio.gather(*posters)
    workers_alive, api_alive = _alive(fleet), int(api.alive)
    unresumed = _unresumed(fleet)
    result = await _settle(rig, timeout_s=load_s + 60)
    log = await rig.deliveries()
    excess, healthy = _pauses(log, shard_of, done)
    killed_shards = {k.shard for k in done}
    healthy_topics = {n for n, s in shard_of.items() if s not in killed_shards}
    per_shard = max(Counter(shard_of.values()).values())
    status = Counter(f"{c.status}:{c.code}" for c in calls if c.status >= 500 or c.status == 0)
    figures = {
        "lost": result["lost"],
        "duplicates": result["duplicates"],
        "duplicates_healthy_shards": _duplicates(log, healthy_topics),
        "duplicates_killed_shards": _duplicates(log, set(shard_of) - healthy_topics),
        "failover_s": [k.failover_s for k in done],
        "killed_shard_excess_s": max((e for e in excess if e is not None), default=None),
        "killed_shard_excess_per_kill_s": excess,
        "healthy_shard_max_gap_s": max(healthy, default=None),
        "healthy_shard_gap_per_kill_s": healthy,
        "api_500": sum(1 for c in calls if c.status == 500),
        "api_5xx_by_code": dict(status),
        "api_calls": len(calls),
        "enqueue_healthy_max_s": _slowest_healthy(calls, shard_of, done),
        "workers_alive": workers_alive,
        "api_alive": api_alive,
        "listeners_unresumed": unresumed,
        "accepted": result["accepted"],
        "duplicate_repeats": _repeats(log, done),
        "topics_per_shard": dict(Counter(shard_of.values())),
        "shard_of_topic": shard_of,
        "seed": seed,
        "events": {"killed": [{"shard": k.shard, "at": round(k.at, 3)} for k in done]},
    }
    bound = kills * math.ceil(qps * per_shard * CHECKPOINT_S)
    return _verdict(
        figures,
        {
            "lost": ("<=", 0),
            "duplicates_healthy_shards": ("<=", 0),
            "duplicates_killed_shards": ("<=", bound),
            "killed_shard_excess_s": ("<=", EXCESS_S),
            "healthy_shard_max_gap_s": ("<=", HEALTHY_PAUSE_S),
            "api_500": ("<=", 0),
            "enqueue_healthy_max_s": ("<=", HEALTHY_PAUSE_S),
            "workers_alive": (">=", workers),
            "api_alive": (">=", 1),
            "listeners_unresumed": ("<=", 0),
        },
    )

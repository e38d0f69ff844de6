"""``emq bench faults``: the fault trials of issue 11 on the real parts, with their figures.

Each trial runs on its own :class:`~emq.bench.rig.Rig` (real Redis with AOF ``everysec``, real
ZooKeeper, ``emq worker`` processes — fleet members unless said otherwise — the API where the
trial needs it, and the recording sink), injects one kind of fault, then measures with the
promise checker (:mod:`emq.bench.promises`) and says which targets were met:

* ``worker_kill`` — ``kill -9`` a random worker (seeded) ``kills`` times and start a new one
  each time: lost, duplicates, recovery time, quota ratios;
* ``redis_restart`` — ``kill -9`` Redis under load and restart it (AOF), then create a topic and
  enqueue through the API: workers alive, delivery gap, API failures, lost;
* ``zk_outage`` — the single ZooKeeper killed for ``outage_s`` under load: gap, lost;
* ``sigstop`` — ``SIGSTOP`` a worker past its session, then ``SIGCONT``: duplicates, lost;
* ``hanging`` — hanging and slow endpoints beside healthy topics: healthy delivered / quota;
* ``poison`` — undeliverable jobs stored straight into the queues: workers alive, poison jobs
  in the DLQ, healthy jobs delivered;
* ``zk_quorum`` — 2 of a 3-node ZooKeeper ensemble down, then back: time to the API's first
  accepted admin write and the workers' latest apply of a change after recovery
  (:mod:`emq.bench.faults_zk`).
* ``cluster_failover`` — two Redis Cluster masters killed under load, once per seed
  (:mod:`emq.bench.cluster_failover`): lost, duplicates, per-shard pauses, API 5xx by code,
  processes alive.

Every trial is a coroutine ``trial(rig, **params)`` returning ``{"figures", "targets", "pass"}``;
:func:`run` runs the chosen ones with their defaults (each about 1-2 minutes) and the tests run
them shortened. ZooKeeper sessions are ``session_s`` (4 s by default, to keep the trials short;
targets that depend on it say so).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from emq.bench import promises
from emq.bench.machine import describe
from emq.bench.rig import ADMIN_TOKEN, BODY, TENANT, Proc, Rig
from emq.core.errors import EmqError
from emq.core.model import Job, RetryPolicy

CHECKPOINT_S = 1.0  # the worker's default checkpoint interval: the duplicate bound's unit
FAST_RETRY = RetryPolicy(max_attempts=2, base_delay_s=0.2, multiplier=2.0, jitter=0.0)
POISON = (
    Job("http://xn--zz/", body=BODY),
    Job("http://\u00ad/", body=BODY),
    Job("http://127.0.0.1:9/t/poison", headers={"X-Poison": "a\x0bb"}, body=BODY),
)

Trial = Callable[..., Awaitable[dict[str, Any]]]


def _verdict(figures: dict[str, Any], targets: dict[str, tuple[str, float]]) -> dict[str, Any]:
    """``targets``: figure -> (``<=`` or ``>=``, bound); a figure that is None fails."""
    met = {}
    for key, (op, bound) in targets.items():
        value = figures.get(key)
        met[key] = value is not None and (value <= bound if op == "<=" else value >= bound)
    return {
        "figures": figures,
        "targets": {k: f"{op} {bound:g}" for k, (op, bound) in targets.items()},
        "pass": met,
        "ok": all(met.values()),
    }


async def _topics(rig: Rig, prefix: str, count: int, qps: int, jobs: int) -> list[str]:
    names = [f"{prefix}{i}" for i in range(count)]
    for name in names:
        await rig.topic(name, qps)
        await rig.enqueue(name, jobs)
    return names


async def _flowing(rig: Rig, names: Sequence[str], timeout_s: float = 30.0) -> None:
    """Wait until every topic of ``names`` had a delivery (the fleet has settled)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if set(names) <= {d.topic for d in await rig.deliveries()}:
            return
        await asyncio.sleep(0.2)


def _alive(procs: Sequence[Proc]) -> int:
    return sum(1 for p in procs if p.alive)


async def _settle(rig: Rig, timeout_s: float) -> dict[str, Any]:
    """Wait for every accepted job (delivered or dead-lettered), then the checker's figures."""
    await rig.wait_delivered(set(rig.accepted), timeout_s, dead=True)
    log = await rig.deliveries()
    return promises.check(log, rig.accepted, await rig.dead_ids(), rig.quotas)


# --------------------------------------------------------------------------- worker kill -9


def _recovery_s(log: Sequence[promises.Delivery], killed_at: float) -> float | None:
    """How long after ``killed_at`` the slowest topic that still had a backlog delivered again
    (the killed worker's groups are the slow ones). A topic whose last delivery came before the
    kill had drained and is left out; None when every topic had."""
    waits = [
        promises.first_after(times, killed_at)
        for times in promises.by_topic(log).values()
        if times and times[-1] >= killed_at
    ]
    return max((w for w in waits if w is not None), default=None)


async def worker_kill(
    rig: Rig,
    workers: int = 3,
    jobs: int = 20_000,
    topics: int = 12,
    qps: int = 25,
    kills: int = 10,
    every_s: float | None = None,
    seed: int = 1,
) -> dict[str, Any]:
    names = await _topics(rig, "k", topics, qps, jobs // topics)
    fleet = [rig.worker(f"w{i}") for i in range(workers)]
    await _flowing(rig, names)
    rng = random.Random(seed)
    killed_at: list[float] = []
    for n in range(kills):
        await asyncio.sleep(every_s if every_s is not None else rig.session_s + 2.5)
        i = rng.randrange(workers)
        fleet[i].kill()
        killed_at.append(time.time())
        fleet[i] = rig.worker(f"w{i}-r{n + 1}")  # a new process: a new id, as a restart gets
    result = await _settle(rig, timeout_s=jobs / (topics * qps) + 60)
    log = await rig.deliveries()
    recoveries = [_recovery_s(log, at) for at in killed_at]
    measured = [r for r in recoveries if r is not None]
    figures = {
        "lost": result["lost"],
        "duplicates": result["duplicates"],
        "max_recovery_s": round(max(measured), 2) if measured else None,
        "recovery_s": [None if r is None else round(r, 2) for r in recoveries],
        "max_second_ratio": result["max_second_ratio"],
        "max_window_ratio": result["max_window_ratio"],
        "quota_held": int(result["quota_held"]),
        "quota_exceeded": result["quota_exceeded"],
        "workers_alive": _alive(fleet),
        "accepted": result["accepted"],
        "session_s": rig.session_s,
        "events": {"killed_at": [round(t, 3) for t in killed_at]},
    }
    dup_bound = max(1, kills) * math.ceil(topics * qps * CHECKPOINT_S)
    return _verdict(
        figures,
        {
            "lost": ("<=", 0),
            "max_recovery_s": ("<=", rig.session_s + 2),
            "duplicates": ("<=", dup_bound),
            "quota_held": (">=", 1),
            "workers_alive": (">=", workers),
        },
    )


# --------------------------------------------------------------------------- Redis restart


async def _post(http: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    try:
        async with http.post(url, json=body, headers=headers) as r:
            return r.status, await r.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError) as e:
        return 0, str(e)


async def _enqueue_api(
    http: aiohttp.ClientSession, rig: Rig, base: str, topic: str, jobs: int
) -> int:
    """``jobs`` enqueues of one job each then one batch of ``jobs``: how many were refused."""
    url = f"{base}/v1/tenants/{TENANT}/topics/{topic}/jobs"
    job = {"url": rig.url(topic), "body": BODY}
    failures = 0
    for body in [job] * jobs + [{"jobs": [job] * jobs}]:
        status, answer = await _post(http, url, body)
        if status == 202:
            rig.accepted.update(answer["ids"])
        else:
            failures += 1
    return failures


async def redis_restart(
    rig: Rig, workers: int = 2, topics: int = 4, qps: int = 50, load_s: float = 40.0,
    down_s: float = 2.0, enqueues: int = 16,
) -> dict[str, Any]:  # fmt: skip
    names = await _topics(rig, "r", topics, qps, int(qps * load_s))
    base = await rig.api()
    fleet = [rig.worker(f"w{i}") for i in range(workers)]
    await _flowing(rig, names)
    await asyncio.sleep(3.0)
    rig.kill(rig.redis)
    killed_at = time.time()
    await asyncio.sleep(down_s)
    rig.redis.start()  # the same directory: the AOF is replayed
    back_at = time.time()
    await asyncio.sleep(2.0)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        status, _ = await _post(
            http, f"{base}/v1/tenants/{TENANT}/topics", {"topic": "fresh", "qps": qps}
        )
        created = status == 201
        if created:
            rig.adopt(await rig.config.get_topic(rig.ref("fresh")))
        failures = await _enqueue_api(http, rig, base, "fresh" if created else names[0], enqueues)
        failures += 0 if created else 1
    await asyncio.sleep(3.0)
    alive_after = _alive(fleet)
    for i, proc in enumerate(fleet):  # as an operator would: "lost" is then what Redis lost
        if not proc.alive:
            fleet[i] = rig.worker(f"w{i}-restarted")
    result = await _settle(rig, timeout_s=load_s + 30)
    times = sorted(d.at for d in await rig.deliveries())
    resumed = promises.first_after(times, back_at)
    figures = {
        "lost": result["lost"],
        "workers_alive": alive_after,
        "workers_restarted": len(fleet) - alive_after,
        "delivery_gap_after_back_s": None if resumed is None else round(resumed, 2),
        "outage_gap_s": round(promises.longest_gap(times, killed_at - 1, back_at + 10), 2),
        "api_failures_after_restart": failures,
        "topic_created_after_restart": int(created),
        "duplicates": result["duplicates"],
        "accepted": result["accepted"],
        "events": {"killed_at": round(killed_at, 3), "back_at": round(back_at, 3)},
    }
    return _verdict(
        figures,
        {
            "lost": ("<=", 0),
            "workers_alive": (">=", workers),
            "delivery_gap_after_back_s": ("<=", 2.0),
            "api_failures_after_restart": ("<=", 0),
        },
    )


# --------------------------------------------------------------------------- ZooKeeper outage


async def zk_outage(
    rig: Rig, workers: int = 2, topics: int = 4, qps: int = 50, outage_s: float = 20.0,
    tail_s: float = 20.0,
) -> dict[str, Any]:  # fmt: skip
    # The backlog outlasts the measured window (the flow before the kill, the outage, 5 s after)
    names = await _topics(rig, "z", topics, qps, int(qps * (outage_s + tail_s + 4)))
    fleet = [rig.worker(f"w{i}") for i in range(workers)]
    await _flowing(rig, names)
    await asyncio.sleep(2.0)
    rig.kill(rig.zk)
    killed_at = time.time()
    await asyncio.sleep(outage_s)
    rig.zk.start()
    back_at = time.time()
    result = await _settle(rig, timeout_s=outage_s + 60)
    by_topic = promises.by_topic(await rig.deliveries())
    # Every job is delivered by now, so a topic's last arrival is its last job: the stretch after
    # it is a drained backlog, not a gap (a slow start on a busy machine drains it sooner).
    gaps = [
        promises.longest_gap(times, killed_at, min(back_at + 5, times[-1] if times else back_at))
        for times in (by_topic.get(n, []) for n in names)
    ]
    figures = {
        "delivery_gap_s": round(max(gaps), 2),
        "lost": result["lost"],
        "duplicates": result["duplicates"],
        "workers_alive": _alive(fleet),
        # Two owners at once are not visible at the sink (it cannot tell workers apart); the
        # Redis epoch fence refusing a stale owner's write is, in the workers' logs.
        "fenced_log_lines": sum(p.log_count("fenced") for p in fleet),
        "quota_held": int(result["quota_held"]),
        "max_window_ratio": result["max_window_ratio"],
        "quota_exceeded": result["quota_exceeded"],
        "outage_s": outage_s,
        "events": {"killed_at": round(killed_at, 3), "back_at": round(back_at, 3)},
    }
    return _verdict(
        figures,
        {
            "delivery_gap_s": ("<=", 2.0),
            "lost": ("<=", 0),
            "workers_alive": (">=", workers),
            "quota_held": (">=", 1),
        },
    )


# --------------------------------------------------------------------------- SIGSTOP


async def sigstop(
    rig: Rig, workers: int = 3, topics: int = 6, qps: int = 40, jobs: int = 8_000,
    stop_s: float | None = None, seed: int = 1,
) -> dict[str, Any]:  # fmt: skip
    names = await _topics(rig, "s", topics, qps, jobs // topics)
    fleet = [rig.worker(f"w{i}") for i in range(workers)]
    await _flowing(rig, names)
    await asyncio.sleep(2.0)
    victim = fleet[random.Random(seed).randrange(workers)]
    victim.signal(signal.SIGSTOP)
    stopped_at = time.time()
    await asyncio.sleep(stop_s if stop_s is not None else rig.session_s + 3)
    victim.signal(signal.SIGCONT)
    resumed_at = time.time()
    result = await _settle(rig, timeout_s=jobs / (topics * qps) + 60)
    figures = {
        "lost": result["lost"],
        "duplicates": result["duplicates"],
        "workers_alive": _alive(fleet),
        "quota_held": int(result["quota_held"]),
        "max_window_ratio": result["max_window_ratio"],
        "quota_exceeded": result["quota_exceeded"],
        "session_s": rig.session_s,
        "events": {"stopped_at": round(stopped_at, 3), "resumed_at": round(resumed_at, 3)},
    }
    return _verdict(
        figures,
        {
            "lost": ("<=", 0),
            "duplicates": ("<=", math.ceil(topics * qps * CHECKPOINT_S)),
            "quota_held": (">=", 1),
        },
    )


# --------------------------------------------------------------------------- hanging endpoints


async def hanging(
    rig: Rig, hanging: int = 50, slow: int = 50, healthy: int = 4, qps: int = 100,
    bad_qps: int = 20, bad_jobs: int = 200, slow_ms: int = 5000, duration_s: float = 30.0,
) -> dict[str, Any]:  # fmt: skip
    for kind, prefix, count in (("hang", "h", hanging), (f"slow/{slow_ms}", "sl", slow)):
        for i in range(count):
            name = f"{prefix}{i}"
            await rig.topic(name, bad_qps)
            await rig.enqueue(name, bad_jobs, url=rig.url(name, kind))
    names = await _topics(rig, "ok", healthy, qps, int(qps * (duration_s + 15)))
    worker = rig.worker("w0", standalone=True)
    await _flowing(rig, names)
    start = time.time() + 3.0  # past the start-up: the bad topics have filled their senders
    await asyncio.sleep(3.0 + duration_s + 0.5)
    log = await rig.deliveries()
    by_topic = promises.by_topic(log)
    ratios = [
        sum(1 for t in by_topic.get(n, []) if start <= t < start + duration_s) / (qps * duration_s)
        for n in names
    ]
    figures = {
        "healthy_min_ratio": round(min(ratios), 3),
        "healthy_mean_ratio": round(sum(ratios) / len(ratios), 3),
        "hanging_requests": sum(1 for d in log if d.status == 0),
        "slow_requests": sum(1 for d in log if d.topic.startswith("sl")),
        "worker_alive": int(worker.alive),
        "hanging_topics": hanging,
        "slow_topics": slow,
    }
    return _verdict(figures, {"healthy_min_ratio": (">=", 0.95), "worker_alive": (">=", 1)})


# --------------------------------------------------------------------------- poison jobs


async def poison(
    rig: Rig, workers: int = 2, healthy: int = 4, qps: int = 50, jobs: int = 1_000,
    timeout_s: float = 40.0,
) -> dict[str, Any]:  # fmt: skip
    names = await _topics(rig, "p", healthy, qps, jobs)
    healthy_ids = set(rig.accepted)
    await rig.topic("poison", 10, retry=FAST_RETRY)
    bad = await rig.put_raw("poison", POISON)
    for i, name in enumerate(names):  # one beside the healthy jobs of each topic too
        bad += await rig.put_raw(name, [POISON[i % len(POISON)]])
    fleet = [rig.worker(f"w{i}") for i in range(workers)]
    await rig.wait_delivered(healthy_ids, timeout_s)
    deadline = time.monotonic() + 10
    dead = await rig.dead_ids()
    while not set(bad) <= dead and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        dead = await rig.dead_ids()
    delivered = promises.delivered_ids(await rig.deliveries())
    figures = {
        "workers_alive": _alive(fleet),
        "poison_in_dlq": len(set(bad) & dead),
        "poison_jobs": len(bad),
        "healthy_delivered_ratio": round(len(healthy_ids & delivered) / len(healthy_ids), 3),
        "exit_codes": [p.proc.returncode if p.proc else None for p in fleet],
    }
    return _verdict(
        figures,
        {
            "workers_alive": (">=", workers),
            "poison_in_dlq": (">=", len(bad)),
            "healthy_delivered_ratio": (">=", 1.0),
        },
    )


# --------------------------------------------------------------------------- Cluster failover


async def cluster_failover(rig: Rig, **params: Any) -> dict[str, Any]:
    """Two Redis Cluster masters killed under load (:mod:`emq.bench.cluster_failover`)."""
    from emq.bench.cluster_failover import cluster_failover as trial

    return await trial(rig, **params)


# --------------------------------------------------------------------------- the suite


def _zk_quorum(rig: Rig, **params: Any) -> Awaitable[dict[str, Any]]:
    from emq.bench import faults_zk  # (it builds on this module's helpers)

    return faults_zk.zk_quorum(rig, **params)


def _rig_class(trial: str) -> type[Rig]:
    if trial == "zk_quorum":  # a 3-node ensemble in place of the single ZooKeeper
        from emq.bench.faults_zk import EnsembleRig

        return EnsembleRig
    if trial == "cluster_failover":  # a Redis Cluster with a replica per master
        from emq.bench.cluster_rig import ClusterRig

        return ClusterRig
    return Rig


TRIALS: dict[str, Trial] = {
    "worker_kill": worker_kill,
    "redis_restart": redis_restart,
    "zk_outage": zk_outage,
    "sigstop": sigstop,
    "hanging": hanging,
    "poison": poison,
    "zk_quorum": _zk_quorum,
    "cluster_failover": cluster_failover,
}
SEEDED = ("cluster_failover",)  # run once per seed of --seeds


async def run_trial(name: str, session_s: float = 4.0, **params: Any) -> dict[str, Any]:
    """One trial on a fresh rig; its result with the trial's name, parameters and duration."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"emq-fault-{name}-") as tmp:
        async with _rig_class(name).running(Path(tmp), session_s) as rig:
            try:
                result = await TRIALS[name](rig, **params)
            except Exception as e:  # one broken trial must not hide the others' figures
                result = {"figures": {}, "targets": {}, "pass": {}, "ok": False, "error": repr(e)}
    return {"trial": name, "params": params, "seconds": round(time.monotonic() - started, 1)} | (
        result
    )


def _runs(name: str, params: dict[str, Any], seeds: int) -> list[dict[str, Any]]:
    """A trial's runs: one per seed 1..``seeds`` for the seeded trials, else one."""
    if name not in SEEDED or "seed" in params:
        return [params]
    return [params | {"seed": s} for s in range(1, seeds + 1)]


def run(
    trials: Sequence[str] = tuple(TRIALS),
    say: Callable[[str], None] = lambda _: None,
    seeds: int = 1,
    **overrides: dict[str, Any],
) -> dict[str, Any]:
    """Run ``trials`` in order (each with its defaults, or ``overrides[name]``; the seeded ones
    once per seed 1..``seeds``): one document."""
    import uvloop

    results = []
    started = time.monotonic()
    for name in trials:
        for params in _runs(name, overrides.get(name, {}), seeds):
            say(f"fault trial {name} {params}...")
            result = uvloop.run(run_trial(name, **params))
            say(f"fault trial {name}: {'pass' if result['ok'] else 'FAIL'} ({result['seconds']} s)")
            results.append(result)
    doc = {
        "bench": "faults",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": describe(),
        "seconds": round(time.monotonic() - started, 1),
        "results": results,
        "pass": all(r["ok"] for r in results),
    }
    doc["markdown"] = summary(doc)
    return doc


def run_cli(
    trials: str,
    duration_s: float | None,
    say: Callable[[str], None] = lambda _: None,
    seeds: int = 1,
) -> dict[str, Any]:
    """``emq bench faults``: ``trials`` comma-separated (empty: all); ``duration_s`` the length
    of each timed fault. A bad name or duration is one :class:`~emq.core.errors.EmqError` line."""
    # The trial's own clients see the faults it injects, and say so: only errors are news here.
    for name in ("kazoo", "adapters"):
        logging.getLogger(name).setLevel(logging.ERROR)
    names = tuple(t.strip() for t in trials.split(",") if t.strip()) or tuple(TRIALS)
    unknown = [n for n in names if n not in TRIALS]
    if unknown:
        raise EmqError(f"--trials: unknown {', '.join(unknown)} (known: {', '.join(TRIALS)})")
    overrides: dict[str, dict[str, Any]] = {}
    if duration_s is not None:
        if not 0 < duration_s <= 600:
            raise EmqError("--duration-s must be greater than 0 and at most 600")
        overrides = {
            "zk_outage": {"outage_s": duration_s},
            "hanging": {"duration_s": duration_s},
            "redis_restart": {"load_s": duration_s},
            "zk_quorum": {"outage_s": duration_s},
            "cluster_failover": {"between_s": duration_s},
        }
    if not 1 <= seeds <= 100:
        raise EmqError("--seeds must be 1-100")
    return run(names, say, seeds, **overrides)


def summary(doc: dict[str, Any]) -> str:
    """One line per trial and figure: the value, the target and whether it was met."""
    lines = ["| trial | figure | measured | target | met |", "|---|---|---|---|---|"]
    for r in doc["results"]:
        if "error" in r:
            lines.append(f"| {r['trial']} | error | {r['error']} |  | **no** |")
        for key, value in r["figures"].items():
            if isinstance(value, (list, dict)):
                continue
            target = r["targets"].get(key, "")
            met = "" if key not in r["pass"] else ("yes" if r["pass"][key] else "**no**")
            lines.append(f"| {r['trial']} | {key} | {value} | {target} | {met} |")
    return "\n".join(lines)

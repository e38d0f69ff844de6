"""``emq bench schedules``: the schedule firer under load and at rest (issue 28).

On its own Redis and ZooKeeper (free loopback ports), with one ``emq scheduler`` process:

* **due**: ``due`` schedules (10 000) whose tick is the same minute boundary; the lag of each
  tick is from its instant to its job stored (the put returned), as the firer records it, 0 for
  a job stored ahead of its tick (``EMQ_SCHEDULER_LOOKAHEAD_S``, default 5 s: the firer stores
  those as delayed jobs due at the tick); target p99 <= 1 s. Every tick must make one job.
* **idle**: ``idle`` more schedules (100 000) whose next tick is a year away; a fresh firer's CPU
  (its utime + stime over ``idle_s``) and memory (its RSS, and the growth from an empty store);
  targets <= 1 % of a core and <= 50 MB.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from emq.bench.machine import describe
from emq.compose import open_config, open_queues, open_schedules
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.schedules import Schedule, ScheduleStore
from emq.core.settings import Settings
from emq.rigs.procs import Proc
from emq.scheduler.settings import SchedulerSettings
from emq.stack import Service, free_port

PER_TOPIC = 1000  # MAX_SCHEDULES_PER_TOPIC: the schedules are spread over topics
JOB = {"url": "http://127.0.0.1:9/tick"}
LAG_TARGET_S = 1.0
CPU_TARGET = 0.01
RSS_TARGET_MB = 50.0
_TICK_S = os.sysconf("SC_CLK_TCK")


def _env(settings: Settings) -> dict[str, str]:
    """The firer's environment: the bench's servers, and the EMQ_SCHEDULER_* settings given
    (``EMQ_SCHEDULER_LOOKAHEAD_S=0 emq bench schedules``: every tick fired at its instant)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("EMQ_") or k.startswith(SchedulerSettings.ENV_PREFIX)
    }
    return env | {"EMQ_REDIS_URL": settings.redis_url, "EMQ_ZK_HOSTS": settings.zk_hosts}


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK_S  # utime, stime


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def _create(store: ScheduleStore, schedules: list[Schedule], cursor: int) -> None:
    for i in range(0, len(schedules), 50):  # 50 at a time: as many connections
        await asyncio.gather(*(store.create(s, cursor) for s in schedules[i : i + 50]))


async def _firing(proc: Proc) -> None:
    while proc.log_count("emq scheduler firing") < 1:
        proc.check()
        await asyncio.sleep(0.05)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _ref(prefix: str, i: int) -> TopicRef:
    return TopicRef(Namespace.ONLINE, "bench", f"{prefix}{i // PER_TOPIC}")


async def _topics(settings: Settings, prefix: str, n: int) -> list[Topic]:
    config = await open_config(settings)
    try:
        if prefix == "due":
            await config.create_tenant(Tenant("bench", "bench", "x", time.time()))
        topics = [Topic(_ref(prefix, i), 300, 2, secret="whsec_YmVuY2hzZWNyZXRiZW5jaHNlY3JldA==")
                  for i in range(0, n, PER_TOPIC)]  # fmt: skip
        for topic in topics:
            await config.create_topic(topic)
        return topics
    finally:
        await config.aclose()


async def _due(settings: Settings, store: ScheduleStore, n: int, tmp: Path) -> dict[str, Any]:
    queues = await open_queues(settings)
    try:
        topics = await _topics(settings, "due", n)
        tick = (int(time.time()) // 60 + 1) * 60
        if tick - time.time() < 20:  # time to create them all and start the firer first
            tick += 60
        minute = time.gmtime(tick)
        cron = f"{minute.tm_min} {minute.tm_hour} * * *"
        made = [Schedule(_ref("due", i), f"d{i}", cron, "UTC", JOB) for i in range(n)]
        started = time.monotonic()
        await _create(store, made, tick)
        created_s = time.monotonic() - started
        proc = Proc("scheduler-due", ["scheduler"], _env(settings), tmp / "due.log")
        try:
            await _firing(proc)
            await asyncio.sleep(max(0.0, tick - time.time()) + 2.0)
            deadline = time.time() + 30
            while True:
                states = [(await store.get(s.topic, s.id))[1] for s in made]
                if all(st.last_tick == tick for st in states) or time.time() > deadline:
                    break
                await asyncio.sleep(0.5)
        finally:
            proc.stop()
        lags = [
            st.last_lag_s for st in states if st.last_tick == tick and st.last_lag_s is not None
        ]
        groups = [g for topic in topics for g in topic.group_refs()]
        queued = sum(await queues.backlog([q for g in groups for q in g.queues()]))
        stored = queued + sum(await queues.delayed(groups))  # fired ahead: delayed till the tick
    finally:
        await queues.aclose()
    late = [max(0.0, lag) for lag in lags]  # a job stored ahead of its tick waited for none
    p99 = _percentile(late, 0.99)
    return {
        "schedules": n,
        "cron": cron,
        "created_s": round(created_s, 2),
        "ticks_fired": len(lags),
        "jobs_stored": stored,
        "lag_s": {
            "p50": round(_percentile(late, 0.5), 3),
            "p99": round(p99, 3),
            "max": round(max(late, default=float("nan")), 3),
        },
        "stored_ahead": sum(1 for lag in lags if lag < 0),
        "earliest_s_before_tick": round(-min(lags, default=0.0), 3),
        "latest_s_before_tick": round(-max(lags, default=0.0), 3),
        "lookahead_s": float(os.environ.get("EMQ_SCHEDULER_LOOKAHEAD_S", "5")),
        "target_p99_s": LAG_TARGET_S,
        "pass": len(lags) == n and stored == n and p99 <= LAG_TARGET_S,
    }


async def _idle(
    settings: Settings, store: ScheduleStore, n: int, idle_s: float, tmp: Path
) -> dict[str, Any]:
    proc = Proc("scheduler-idle", ["scheduler"], _env(settings), tmp / "idle.log")
    try:
        await _firing(proc)
        await asyncio.sleep(2.0)
        empty_rss = _rss_mb(proc.pid)
        far = int(time.time()) + 300 * 86400  # a year's tick, but the index says so
        started = time.monotonic()
        await _topics(settings, "idle", n)
        idle = [Schedule(_ref("idle", i), f"i{i}", "0 0 1 1 *", "UTC", JOB) for i in range(n)]
        await _create(store, idle, far)
        created_s = time.monotonic() - started
        await asyncio.sleep(2.0)
        cpu0, wall0 = _cpu_s(proc.pid), time.monotonic()
        await asyncio.sleep(idle_s)
        cpu1, wall1 = _cpu_s(proc.pid), time.monotonic()
        rss = _rss_mb(proc.pid)
        proc.check()
    finally:
        proc.stop()
    share = (cpu1 - cpu0) / (wall1 - wall0)
    growth = rss - empty_rss
    return {
        "schedules": n,
        "created_s": round(created_s, 2),
        "measured_s": round(wall1 - wall0, 1),
        "cpu_share_of_a_core": round(share, 5),
        "rss_mb": round(rss, 1),
        "rss_growth_mb": round(growth, 1),
        "target_cpu_share": CPU_TARGET,
        "target_mb": RSS_TARGET_MB,
        "pass": share <= CPU_TARGET and growth <= RSS_TARGET_MB,
    }


async def _run(settings: Settings, due: int, idle: int, idle_s: float, tmp: Path) -> dict[str, Any]:
    store = open_schedules(settings)
    try:
        due_doc = await _due(settings, store, due, tmp)
        idle_doc = await _idle(settings, store, idle, idle_s, tmp)
    finally:
        await store.aclose()
    return {
        "bench": "schedules",
        "due": due_doc,
        "idle": idle_doc,
        "pass": due_doc["pass"] and idle_doc["pass"],
        "machine": describe(),
    }


def run(due: int = 10_000, idle: int = 100_000, idle_s: float = 20.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as tmp:
        redis = Service("redis", "redis.sh", Path(tmp) / "redis", free_port())
        zk = Service("zookeeper", "zookeeper.sh", Path(tmp) / "zk", free_port())
        redis.start()
        try:
            zk.start()
            settings = Settings(redis_url=f"redis://{redis.address}/0", zk_hosts=zk.address)
            import uvloop

            return uvloop.run(_run(settings, due, idle, idle_s, Path(tmp)))
        finally:
            zk.stop()
            redis.stop()


def summary(doc: dict[str, Any]) -> str:
    d, i = doc["due"], doc["idle"]
    return (
        f"due: {d['ticks_fired']} of {d['schedules']} ticks fired, {d['jobs_stored']} jobs, "
        f"lag p50 {d['lag_s']['p50']} s p99 {d['lag_s']['p99']} s max {d['lag_s']['max']} s "
        f"(target p99 <= {d['target_p99_s']} s: {'met' if d['pass'] else 'NOT met'})\n"
        f"idle: {i['schedules']} schedules, firer CPU {100 * i['cpu_share_of_a_core']:.2f} % of a "
        f"core, RSS {i['rss_mb']} MB (+{i['rss_growth_mb']} MB for them) (targets 1 %, 50 MB: "
        f"{'met' if i['pass'] else 'NOT met'})"
    )

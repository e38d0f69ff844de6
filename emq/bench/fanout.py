"""``emq bench fanout``: events that fan out to 10 and 100 subscriptions, against plain jobs.

On loopback: Redis, ZooKeeper, the sink process, one ``emq api`` and (for the second part) one
``emq worker --standalone`` (:class:`emq.bench.rig.Rig`). For each fan-out ``n``, two topics are
made paused (so that nothing is delivered while the API is measured): ``evN`` with ``n``
subscriptions matching ``invoice.*`` (and 5 that do not match) and ``jbN`` without any; two of
each (``a`` and ``b``), each getting half of the work (rounds alternate between them).

1. **API CPU per delivery created.** ``deliveries`` delivery jobs are created through the API
   twice, alternating the two ways for ``rounds`` rounds (a neighbour's load falls on both):
   single events to ``evN`` (each makes ``n`` jobs), and batch enqueues of ``n`` jobs to ``jbN``
   (the same URL, headers and body size as a delivery). The API process's CPU time
   (``/proc/<pid>/stat``) over each is divided by the jobs it created. Target: events <= jobs.
2. **Delivered/s end to end.** The worker starts and delivers a warm-up topic; then each topic
   is resumed in turn, in the order ``evNa, jbNa, jbNb, evNb``, and timed at the sink from its
   first job seen to its last. Target: events within 10 % of jobs.

The load generator runs in this process with ``concurrency`` requests in flight.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

from capacity import group_count
from emq.bench.machine import describe
from emq.bench.rig import ADMIN_TOKEN, SECRET, TENANT, Rig
from emq.core.errors import EmqError
from emq.core.model import Topic

QPS = 5000
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _plain_job(url: str, i: int) -> dict[str, Any]:
    """A job like an event's delivery: the same headers and body size."""
    body = {
        "type": "invoice.paid",
        "timestamp": "2026-01-01T00:00:00.000+00:00",
        "data": {"invoice": i, "amount": 1250, "currency": "EUR"},
    }
    headers = {"X-Team": "billing", "emq-event-id": f"evt_{i:032x}", "emq-event-type": "x"}
    return {"url": url, "headers": headers, "body": body}


class Load:
    """The bench's HTTP client to the API (admin token)."""

    def __init__(self, base: str, http: aiohttp.ClientSession) -> None:
        self.base, self.http = base, http
        self.auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    async def post(self, path: str, body: Any, status: int = 202) -> Any:
        async with self.http.post(self.base + path, json=body, headers=self.auth) as r:
            if r.status != status:
                raise EmqError(f"POST {path}: HTTP {r.status}: {(await r.text())[:300]}")
            return await r.json()

    async def spread(self, bodies: list[tuple[str, Any]], concurrency: int) -> None:
        it = iter(bodies)

        async def one() -> None:
            for path, body in it:
                await self.post(path, body)

        await asyncio.gather(*(one() for _ in range(concurrency)))


async def _topics(rig: Rig, load: Load, n: int) -> None:
    """Per fan-out ``n``, two topics of each way (``a`` and ``b``, one per half of the work)."""
    groups = group_count(QPS, rig.settings.max_group_qps)
    for half in "ab":
        for name in (f"ev{n}{half}", f"jb{n}{half}"):
            topic = Topic(
                rig.ref(name), QPS, groups, secret=SECRET, paused=True, max_backlog=100_000_000
            )
            await rig.config.create_topic(topic)
        path = f"/v1/tenants/{TENANT}/topics/ev{n}{half}/subscriptions"
        for i in range(n):
            sub = {
                "url": rig.url(f"ev{n}{half}"),
                "event_types": ["invoice.*"],
                "headers": {"X-Team": f"t{i}"},
            }
            await load.post(path, sub, 201)
        for _ in range(5):
            sub = {"url": rig.url(f"ev{n}{half}"), "event_types": ["order.*"]}
            await load.post(path, sub, 201)


async def _api_cpu(
    rig: Rig, load: Load, api_pid: int, n: int, deliveries: int, rounds: int, concurrency: int
) -> dict[str, Any]:
    requests = max(1, deliveries // n)
    spent = {"events": 0.0, "jobs": 0.0}
    made = {"events": 0, "jobs": 0}
    for r in range(rounds):
        half = "ab"[r % 2]  # (rounds alternate between the two halves' topics)
        events = f"/v1/tenants/{TENANT}/topics/ev{n}{half}/events"
        jobs = f"/v1/tenants/{TENANT}/topics/jb{n}{half}/jobs"
        event_bodies = [
            (
                events,
                {
                    "type": "invoice.paid",
                    "payload": {"invoice": i, "amount": 1250, "currency": "EUR"},
                },
            )
            for i in range(requests)
        ]
        url = rig.url(f"jb{n}{half}")
        job_bodies = [
            (jobs, {"jobs": [_plain_job(url, i * n + k) for k in range(n)]})
            for i in range(requests)
        ]
        order = [("events", event_bodies), ("jobs", job_bodies)]
        for kind, bodies in order if r % 2 == 0 else order[::-1]:
            before = process_cpu_s(api_pid)
            await load.spread(bodies, concurrency)
            spent[kind] += process_cpu_s(api_pid) - before
            made[kind] += requests * n
    per = {k: 1e6 * spent[k] / made[k] for k in spent}
    return {
        "deliveries": made["events"],
        "jobs": made["jobs"],
        "events_cpu_us_per_delivery": round(per["events"], 2),
        "jobs_cpu_us_per_job": round(per["jobs"], 2),
        "ratio": round(per["events"] / per["jobs"], 3),
        "met": per["events"] <= per["jobs"],
    }


async def _delivered_per_s(rig: Rig, name: str, total: int, timeout_s: float) -> float:
    """Resume topic ``name`` and time its ``total`` jobs at the sink, from the first one seen
    (the worker's pick-up of a resumed topic is the same for both ways, and not delivery)."""
    await rig.sink.get("/_reset")  # the sink's stats hold one topic: polling them stays cheap
    await rig.config.update_topic(rig.ref(name), lambda t: replace(t, paused=False))
    started = time.monotonic()
    first = None
    while time.monotonic() - started < timeout_s:
        stats = await rig.sink.get("/_stats")
        got = sum(stats["per_second"].get(name, {}).values())
        now = time.monotonic()
        if got and first is None:
            first = (now, got)
        if got >= total:
            assert first is not None
            return (total - first[1]) / max(1e-3, now - first[0])
        await asyncio.sleep(0.05)
    raise EmqError(f"{name}: not all {total} jobs delivered within {timeout_s:.0f} s")


async def _warm_up(rig: Rig, load: Load) -> None:
    """A topic delivered before the timed ones: the worker's connections and code are warm."""
    groups = group_count(QPS, rig.settings.max_group_qps)
    await rig.config.create_topic(Topic(rig.ref("warm"), QPS, groups, secret=SECRET))
    url = rig.url("warm")
    path = f"/v1/tenants/{TENANT}/topics/warm/jobs"
    for i in range(5):
        await load.post(path, {"jobs": [_plain_job(url, i * 1000 + k) for k in range(1000)]})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        stats = await rig.sink.get("/_stats")
        if sum(stats["per_second"].get("warm", {}).values()) >= 5000:
            return
        await asyncio.sleep(0.1)
    raise EmqError("the warm-up topic was not delivered within 120 s")


async def _abba(rig: Rig, n: int, deliveries: int, jobs: int) -> tuple[float, float]:
    """Delivered/s of each way, timed in the order events, jobs, jobs, events (half the work
    each), so that what runs first or last favours neither; the rate over both halves."""
    times = {"ev": 0.0, "jb": 0.0}
    halves = {"ev": deliveries // 2, "jb": jobs // 2}
    for kind, half in (("ev", "a"), ("jb", "a"), ("jb", "b"), ("ev", "b")):
        rate = await _delivered_per_s(rig, f"{kind}{n}{half}", halves[kind], 300)
        times[kind] += halves[kind] / rate
    return 2 * halves["ev"] / times["ev"], 2 * halves["jb"] / times["jb"]


async def _run(
    fanouts: tuple[int, ...], deliveries: int, rounds: int, concurrency: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="emq-bench-fanout-") as tmp:
        async with Rig.running(Path(tmp)) as rig, aiohttp.ClientSession() as http:
            base = await rig.api()
            api_pid = rig.procs[-1].pid
            load = Load(base, http)
            out: dict[str, Any] = {}
            for n in fanouts:
                await _topics(rig, load, n)
                out[str(n)] = await _api_cpu(rig, load, api_pid, n, deliveries, rounds, concurrency)
            rig.worker("w1", standalone=True).start()
            await _warm_up(rig, load)
            for n in fanouts:
                row = out[str(n)]
                ev, jb = await _abba(rig, n, row["deliveries"], row["jobs"])
                row |= {
                    "events_delivered_per_s": round(ev),
                    "jobs_delivered_per_s": round(jb),
                    "delivered_ratio": round(ev / jb, 3),
                    "delivered_met": ev >= 0.9 * jb,
                }
    return {
        "bench": "fanout",
        "fanouts": out,
        "targets": {
            "cpu": "events' API CPU per delivery <= a batch enqueue's per job",
            "delivered": "events' delivered/s within 10 % of plain jobs'",
        },
        "settings": {
            "deliveries": deliveries,
            "rounds": rounds,
            "concurrency": concurrency,
            "topic_qps": QPS,
        },
        "machine": describe(),
    }


def run(
    fanouts: tuple[int, ...] = (10, 100),
    deliveries: int = 10_000,
    rounds: int = 4,
    concurrency: int = 8,
) -> dict[str, Any]:
    """The bench (see the module); ``deliveries`` per round and way, per fan-out."""
    return asyncio.run(_run(fanouts, deliveries, rounds, concurrency))


def summary(doc: dict[str, Any]) -> str:
    lines = []
    for n, row in doc["fanouts"].items():
        lines.append(
            f"fan-out {n}: API CPU {row['events_cpu_us_per_delivery']} us/delivery vs "
            f"{row['jobs_cpu_us_per_job']} us/job ({'met' if row['met'] else 'NOT met'}); "
            f"delivered {row['events_delivered_per_s']}/s vs {row['jobs_delivered_per_s']}/s "
            f"({'met' if row['delivered_met'] else 'NOT met'})"
        )
    return "\n".join(lines)

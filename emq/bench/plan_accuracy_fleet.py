"""The measured side of ``emq bench plan-accuracy``: compressed arrivals through a real fleet.

On :class:`emq.bench.rig.Rig` (Redis, ZooKeeper, the recording loopback sink) it starts
``emq api`` and ``workers`` ``emq worker`` processes (a fleet: membership and assignment
through ZooKeeper), creates each topic at its quota through the admin API, delivers one job per
topic first (so that every worker has joined and every topic's groups are owned before the
clock starts), then sends each topic's jobs at their arrival times (:meth:`Arrivals.times`), a
batch per topic every :data:`TICK_S`, and waits until every job was received.

A job's enqueue time is when its batch was sent to the API (it cannot be delivered earlier); its
delivery, when the sink's kernel received its request (the sink's log: the first 2xx of its
``webhook-id``). :func:`measure` turns those two stamps into the three figures; the workers'
own counters are not read.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import time
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from emq.bench import promises
from emq.bench.rig import ADMIN_TOKEN, BODY, TENANT, Rig
from emq.core.errors import EmqError
from emq.rigs.procs import stop_all

if TYPE_CHECKING:
    from spark.accuracy import Arrivals

TICK_S = 0.05  # jobs due are sent every 50 ms: arrivals are even to within a tick
DRAIN_GRACE_S = 30.0  # beyond the longest predicted delay, how long to wait for the last jobs


def measure(
    arrivals: Sequence[Arrivals],
    sent: Mapping[str, tuple[str, float]],
    received: Mapping[str, float],
    t0: float,
) -> dict[str, dict[str, float | None]]:
    """Per topic, from the stamps alone: delivered/s (jobs received within the replay's
    ``duration_s`` from ``t0``, over it), the backlog's peak (most jobs sent and not yet
    received at any moment) and the longest delay (receipt less sending). ``sent``: job id ->
    (topic, when sent); ``received``: job id -> when first received with a 2xx. A job never
    received makes the delay unmeasurable (None)."""
    out: dict[str, dict[str, float | None]] = {}
    for a in arrivals:
        ids = [i for i, (topic, _) in sent.items() if topic == a.topic]
        got = sorted(received[i] for i in ids if i in received)
        within = bisect.bisect_right(got, t0 + a.duration_s) - bisect.bisect_left(got, t0)
        delays = [received[i] - sent[i][1] for i in ids if i in received]
        stamps = sorted(sent[i][1] for i in ids)
        out[a.topic] = {
            "delivered_per_s": within / a.duration_s if ids else None,
            "backlog_peak": float(backlog_peak(stamps, got)),
            "longest_delay_s": max(delays) if delays and len(delays) == len(ids) else None,
            "backlogged_share": backlogged_share(stamps, got, a.qps),
        }
    return out


def backlogged_share(sent: Sequence[float], received: Sequence[float], qps: int) -> float | None:
    """Jobs received per second while at least a second of the quota waited, as a share of
    ``qps`` (what the dry-run takes as 1: served at the quota); None if no backlog lasted a
    second. (Sorted stamps.)"""
    level, since, busy_s, got = 0, None, 0.0, 0
    for t, step in _events(sent, received):
        if since is not None and step < 0:
            got += 1
        level += step
        if since is None and level >= qps:
            since = t
        elif since is not None and level < qps:
            busy_s, since = busy_s + t - since, None
    return round(got / busy_s / qps, 4) if busy_s >= 1.0 else None


def _events(sent: Sequence[float], received: Sequence[float]) -> list[tuple[float, int]]:
    """Sendings (+1) and receipts (-1) in time order, a receipt first on a tie."""
    return sorted([(t, 1) for t in sent] + [(t, -1) for t in received])


def backlog_peak(sent: Sequence[float], received: Sequence[float]) -> int:
    """The most jobs sent and not yet received at any moment (a receipt at the very time of a
    sending counts first: the peak is not made of a stamp tie)."""
    peak = level = 0
    for _, step in _events(sent, received):
        level += step
        peak = max(peak, level)
    return peak


class Replayer:
    """The API client of one replay: topics, warm-up, the timed sending."""

    def __init__(self, rig: Rig, base: str, http: aiohttp.ClientSession) -> None:
        self.rig, self.base, self.http = rig, base, http
        self.sent: dict[str, tuple[str, float]] = {}
        self.refused = 0

    async def call(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        url = f"{self.base}/v1/tenants/{TENANT}{path}"
        async with self.http.request(method, url, json=body, headers=headers) as r:
            return r.status, await r.json(content_type=None)

    async def create(self, topic: str, qps: int) -> None:
        body = {"topic": topic, "qps": qps, "max_backlog": 1_000_000}
        status, answer = await self.call("POST", "/topics", body)
        if status != 201:
            raise EmqError(f"creating topic {topic}: {status} {answer}")

    async def send(self, topic: str, count: int) -> list[str]:
        """``count`` jobs of ``topic`` in one request; their ids (stamped as sent now)."""
        at = time.time()
        job = {"url": self.rig.url(topic), "body": BODY}
        status, answer = await self.call("POST", f"/topics/{topic}/jobs", {"jobs": [job] * count})
        if status != 202:
            self.refused += count
            return []
        self.sent |= {job_id: (topic, at) for job_id in answer["ids"]}
        return list(answer["ids"])

    async def replay(self, arrivals: Sequence[Arrivals]) -> float:
        """Every topic's jobs at their times from now on; the start's wall time."""
        due = {a.topic: a.times() for a in arrivals}
        done = dict.fromkeys(due, 0)
        t0 = time.time()
        end = max(a.duration_s for a in arrivals)
        while any(done[t] < len(times) for t, times in due.items()):
            now = time.time() - t0
            batches = []
            for topic, times in due.items():
                upto = bisect.bisect_right(times, now)
                if upto > done[topic]:
                    batches.append(self.send(topic, upto - done[topic]))
                    done[topic] = upto
            await asyncio.gather(*batches)
            if now > end + TICK_S:
                break
            await asyncio.sleep(max(0.0, TICK_S - (time.time() - t0 - now)))
        return t0


async def replay(
    tmp: Path, arrivals: Sequence[Arrivals], workers: int = 2, first: Awaitable[Any] | None = None
) -> tuple[dict[str, dict[str, float | None]], dict[str, Any]]:
    """Run the arrivals through a fresh fleet (once it delivers, and ``first`` is done: the
    replay's clock starts after both); the measured figures and the run's detail."""
    async with Rig.running(tmp / "rig") as rig:
        base = await rig.api()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            r = Replayer(rig, base, http)
            for a in arrivals:
                await r.create(a.topic, a.qps)
            for i in range(workers):
                rig.worker(f"w{i}", standalone=False)
            warm = [job for a in arrivals for job in await r.send(a.topic, 1)]
            await rig.wait_delivered(set(warm), 60)
            if not set(warm) <= promises.delivered_ids(await rig.deliveries()):
                raise EmqError("the fleet did not deliver the warm-up jobs within 60 s")
            r.sent.clear()
            if first is not None:
                await first  # (a dry-run that failed ends the run before the replay)
            loads = [os.getloadavg()[0]]
            started = time.monotonic()
            t0 = await r.replay(arrivals)
            loads.append(os.getloadavg()[0])
            sending_s = time.monotonic() - started
            longest = max(a.jobs / a.qps for a in arrivals)  # at most: all of it queued at once
            waited = await rig.wait_delivered(set(r.sent), longest + DRAIN_GRACE_S)
        log = await rig.deliveries()
        stop_all([p for p in rig.procs if p.alive], hurry=True)
    received: dict[str, float] = {}
    for d in log:
        if d.ok and d.job_id in r.sent and d.job_id not in received:
            received[d.job_id] = d.at
    detail = {
        "workers": workers,
        "jobs_sent": len(r.sent),
        "jobs_received": len(received),
        "jobs_refused": r.refused,
        "sending_s": round(sending_s, 2),
        "drain_wait_s": round(waited, 2),
        # The 1-minute load average as the replay started and as its sending ended: the
        # fleet's figures are those of a machine this busy.
        "loadavg_1m": [round(x, 2) for x in loads],
    }
    return measure(arrivals, r.sent, received, t0), detail

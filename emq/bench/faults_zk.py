"""``emq bench faults --trials zk_quorum``: a ZooKeeper ensemble losing its quorum, and back.

The trial runs on an :class:`EnsembleRig`: the fault rig with a 3-node ensemble
(:class:`~emq.rigs.ensemble.ZkEnsemble`) in place of the single ZooKeeper. Fleet workers and the
API run against all three nodes; two of them are killed for ``outage_s`` under load, then
started again. From the moment a client of the trial's own can write again (the quorum is
back), it measures:

* ``admin_write_after_quorum_s`` — how long the API took to accept an admin write (a ``PATCH``
  of a topic's quota, tried every 0.1 s from the moment the nodes are restarted; until then
  the API answers 503);
* ``worker_apply_max_s`` — for every quota change made after recovery (the first accepted
  write and ``changes`` more on every topic), the latest time any worker took to apply it,
  read from the line each worker logs when it applies a topic's quota; a change a worker never
  applied is a missing figure (the trial fails);
* ``delivery_gap_s`` (delivery goes on without a quorum), ``lost`` and ``workers_alive``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from emq.bench import promises
from emq.bench.faults import _flowing, _settle, _verdict
from emq.bench.rig import ADMIN_TOKEN, TENANT, Proc, Rig
from emq.rigs.ensemble import ZkEnsemble

PROBE_EVERY_S = 0.1


class EnsembleRig(Rig):
    """The fault rig on a 3-node ZooKeeper ensemble (``rig.ensemble``; ``rig.zk`` is it too)."""

    def __init__(self, tmp: Path, session_s: float = 4.0) -> None:
        super().__init__(tmp, session_s)
        self.ensemble = ZkEnsemble(tmp / "ensemble")
        self.zk = self.ensemble  # type: ignore[assignment]  # start()/stop() as a Service's
        self.settings = dataclasses.replace(self.settings, zk_hosts=self.ensemble.hosts)

    async def _start(self) -> None:
        self.ensemble.start()
        await asyncio.to_thread(self.ensemble.wait_quorum)
        await super()._start()


async def _patch_qps(
    http: aiohttp.ClientSession, base: str, topic: str, qps: int
) -> tuple[int, float]:
    """PATCH a topic's quota through the API: the status (0: no answer) and when it came."""
    url = f"{base}/v1/tenants/{TENANT}/topics/{topic}"
    try:
        async with http.patch(
            url, json={"qps": qps}, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        ) as r:
            await r.read()
            return r.status, time.time()
    except (aiohttp.ClientError, TimeoutError):
        return 0, time.time()


def applied_at(log: str, ref: str, qps: int) -> float | None:
    """When a worker's log says it applied quota ``qps`` to topic ``ref`` (epoch seconds)."""
    needle = f"topic {ref}: quota {qps} QPS"
    for line in log.splitlines():
        if needle in line:
            stamp, _, millis = line[:23].partition(",")
            return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000
    return None


def _apply_delays(
    workers: Sequence[Proc], changes: Sequence[tuple[str, int, float]]
) -> list[float | None]:
    """For each change (topic ref, quota, accepted at): the slowest worker's delay, or None."""
    logs = [w.log(chars=10_000_000) for w in workers]
    delays: list[float | None] = []
    for ref, qps, accepted in changes:
        found = [applied_at(log, ref, qps) for log in logs]
        if any(at is None for at in found):
            delays.append(None)
        else:
            delays.append(max(0.0, max(at for at in found if at is not None) - accepted))
    return delays


async def _first_write(
    http: aiohttp.ClientSession, base: str, topic: str, qps: int, timeout_s: float
) -> tuple[int, float] | None:
    """PATCH ``topic`` every 0.1 s (each with a new quota) until accepted: that quota and when."""
    deadline = time.monotonic() + timeout_s
    value = qps
    while time.monotonic() < deadline:
        value += 1
        status, at = await _patch_qps(http, base, topic, value)
        if status == 200:
            return value, at
        await asyncio.sleep(PROBE_EVERY_S)
    return None


async def zk_quorum(
    rig: Rig, workers: int = 2, topics: int = 2, qps: int = 10, outage_s: float = 30.0,
    changes: int = 3, change_every_s: float = 2.0, apply_wait_s: float = 5.0,
) -> dict[str, Any]:  # fmt: skip
    """``apply_wait_s``: how long after the last change the workers' logs are read."""
    assert isinstance(rig, EnsembleRig)
    names = [f"q{i}" for i in range(topics)]
    for name in names:
        await rig.topic(name, qps)
        await rig.enqueue(name, int(qps * (outage_s + 20)))
    base = await rig.api()
    fleet = [rig.worker(f"w{i}") for i in range(workers)]
    await _flowing(rig, names)
    await asyncio.sleep(2.0)
    rig.ensemble.kill([2, 3])
    killed_at = time.time()
    await asyncio.sleep(outage_s)
    rig.ensemble.start([2, 3])
    back_at = time.time()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        probe = asyncio.create_task(_first_write(http, base, names[0], qps + 100, outage_s + 60))
        quorum_at = await asyncio.to_thread(rig.ensemble.wait_quorum, outage_s + 60)
        first = await probe
        made: list[tuple[str, int, float]] = []
        if first is not None:
            made.append((str(rig.ref(names[0])), *first))
            for i in range(changes):
                await asyncio.sleep(change_every_s)
                for name in names:
                    status, at = await _patch_qps(http, base, name, qps + 200 + i)
                    if status == 200:
                        made.append((str(rig.ref(name)), qps + 200 + i, at))
        await asyncio.sleep(apply_wait_s)
        delays = _apply_delays(fleet, made)
        for name in names:  # drain the backlog quickly for the loss count
            await _patch_qps(http, base, name, 300)
    result = await _settle(rig, timeout_s=60)
    by_topic = promises.by_topic(await rig.deliveries())
    gaps = [
        promises.longest_gap(times, killed_at, min(back_at, times[-1] if times else back_at))
        for times in (by_topic.get(n, []) for n in names)
    ]
    known = [d for d in delays if d is not None]
    figures = {
        "admin_write_after_quorum_s": (
            None if first is None else round(max(0.0, first[1] - quorum_at), 2)
        ),
        "quorum_after_restart_s": round(quorum_at - back_at, 2),
        "changes_after_recovery": len(made),
        "changes_applied_by_every_worker": len(known),
        "worker_apply_max_s": round(max(known), 2) if known and len(known) == len(made) else None,
        "delivery_gap_s": round(max(gaps), 2),
        "lost": result["lost"],
        "workers_alive": sum(1 for p in fleet if p.alive),
        "api_alive": int(all(p.alive for p in rig.procs if p.name == "api")),
        "outage_s": outage_s,
        "session_s": rig.session_s,
    }
    return _verdict(
        figures,
        {
            "admin_write_after_quorum_s": ("<=", 2.0),
            "worker_apply_max_s": ("<=", 2.0),
            "changes_after_recovery": (">=", 1 + changes * topics),
            "delivery_gap_s": ("<=", 2.0),
            "lost": ("<=", 0),
            "workers_alive": (">=", workers),
        },
    )

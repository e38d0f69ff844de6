"""``emq bench transactions``: what a transaction costs the API against a plain enqueue.

Starts its own Redis and ZooKeeper (:class:`emq.bench.rig.Rig`, free loopback ports, a
temporary directory) and one ``emq api`` process. Each round enqueues 1000 jobs directly (one
``POST .../jobs`` of a 1000-job batch), then the same 1000 jobs in a transaction (open it,
``POST .../transactions/{id}/jobs`` with the batch, commit: prepare plus commit, the jobs in
their queues when the commit answers). The figures are the medians over the rounds of each
path's wall time as the client sees it, one request at a time (no worker runs, so the API and
Redis have the machine to themselves); the target: a transaction costs at most twice the
direct enqueue (``ratio <= 2``).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from emq.bench.machine import describe
from emq.bench.rig import ADMIN_TOKEN, TENANT, Rig

JOBS = 1000
TARGET_RATIO = 2.0


def _batch(round_no: int, url: str) -> dict[str, Any]:
    return {"jobs": [{"url": url, "body": f'{{"round":{round_no},"n":{i}}}'} for i in range(JOBS)]}


async def _post(http: aiohttp.ClientSession, url: str, body: object, status: int) -> Any:
    async with http.post(url, json=body) as r:
        answer = await r.json()
        if r.status != status:
            raise RuntimeError(f"POST {url}: {r.status} {answer}")
        return answer


async def _round(http: aiohttp.ClientSession, base: str, n: int) -> tuple[float, float]:
    """(direct enqueue, transaction) seconds for one round of 1000 jobs each."""
    topic = f"{base}/v1/tenants/{TENANT}/topics/bench"
    batch = _batch(n, "https://example.com/hook")
    started = time.perf_counter()
    await _post(http, topic + "/jobs", batch, 202)
    direct = time.perf_counter() - started
    started = time.perf_counter()
    tx = await _post(http, topic + "/transactions", {"check_url": "https://example.com/c"}, 201)
    path = f"{topic}/transactions/{tx['transaction_id']}"
    await _post(http, path + "/jobs", batch, 202)
    done = await _post(http, path + "/commit", None, 200)
    transaction = time.perf_counter() - started
    if not done["released"]:
        raise RuntimeError(f"the commit answered before its jobs were released: {done}")
    return direct, transaction


def run(rounds: int = 20, say: Any = print) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="emq-bench-tx-") as tmp:
            async with Rig.running(Path(tmp)) as rig:
                await rig.topic("bench", 1000)
                base = await rig.api()
                headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
                async with aiohttp.ClientSession(headers=headers) as http:
                    await _round(http, base, -1)  # warm-up: connections, scripts, caches
                    times = [await _round(http, base, n) for n in range(rounds)]
                say(f"{rounds} rounds of {JOBS} jobs done")
        direct = statistics.median(d for d, _ in times)
        transaction = statistics.median(t for _, t in times)
        ratio = transaction / direct
        return {
            "bench": "transactions",
            "jobs": JOBS,
            "rounds": rounds,
            "direct_enqueue_ms": round(direct * 1000, 2),
            "transaction_ms": round(transaction * 1000, 2),
            "ratio": round(ratio, 2),
            "target_ratio": TARGET_RATIO,
            "pass": ratio <= TARGET_RATIO,
            "machine": describe(),
        }

    return asyncio.run(main())


def summary(doc: dict[str, Any]) -> str:
    verdict = "met" if doc["pass"] else "NOT met"
    return (
        f"{doc['jobs']} jobs, median of {doc['rounds']} rounds: direct enqueue "
        f"{doc['direct_enqueue_ms']} ms, transaction (open + prepare + commit) "
        f"{doc['transaction_ms']} ms: {doc['ratio']}x (target <= {doc['target_ratio']}x, {verdict})"
    )

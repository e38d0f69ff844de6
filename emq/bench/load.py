"""A load generator for the enqueue API, run in its own process by ``emq bench enqueue``.

One ``ClientSession`` with a bounded connector, a fixed pool of sender tasks, bodies encoded
once: the client must cost as little as possible so the figures measure the server.

    python -m emq.bench.load URL TOKEN --batch 1000 --concurrency 8 --duration-s 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import aiohttp
import uvloop


async def _sender(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    deadline: float,
    latencies: list[float],
    failures: list[int],
) -> None:
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        async with session.post(url, data=body, headers=headers) as r:
            await r.read()
            if r.status != 202:
                failures.append(r.status)
                continue
        latencies.append(time.perf_counter() - start)


async def run(
    url: str, token: str, batch: int, concurrency: int, duration_s: float
) -> dict[str, float]:
    job = {"url": "https://example.com/hook", "body": {"order": 12345, "status": "paid"}}
    body = json.dumps({"jobs": [job] * batch} if batch > 1 else job).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    latencies: list[float] = []
    failures: list[int] = []
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar(), skip_auto_headers=("User-Agent",)
    ) as session:
        # Warm up connections and server caches before the clock starts.
        await asyncio.gather(
            *(session.post(url, data=body, headers=headers) for _ in range(concurrency))
        )
        start = time.perf_counter()
        deadline = start + duration_s
        await asyncio.gather(
            *(
                _sender(session, url, body, headers, deadline, latencies, failures)
                for _ in range(concurrency)
            )
        )
        elapsed = time.perf_counter() - start
    latencies.sort()
    n = len(latencies)
    return {
        "requests": n,
        "failed_requests": len(failures),
        "jobs": n * batch,
        "seconds": round(elapsed, 3),
        "requests_per_s": round(n / elapsed, 1),
        "jobs_per_s": round(n * batch / elapsed, 1),
        "p50_ms": round(latencies[n // 2] * 1000, 2) if n else 0.0,
        "p99_ms": round(latencies[min(n - 1, int(n * 0.99))] * 1000, 2) if n else 0.0,
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m emq.bench.load")
    p.add_argument("url")
    p.add_argument("token")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--duration-s", type=float, default=10.0)
    a = p.parse_args()
    result = uvloop.run(run(a.url, a.token, a.batch, a.concurrency, a.duration_s))
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()

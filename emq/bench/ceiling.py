"""The plain-client ceiling: the fastest a tuned aiohttp client sends to the benchmark sink.

    python -m emq.bench.ceiling BASE_URL --topics N --concurrency C --duration-s D

Run in its own process by ``emq bench dispatch`` (W2), against the same sink process as the
worker, so ``jobs_per_s / requests_per_s`` says how much of the HTTP client's speed the
worker's scheduling leaves. Tuned as the worker's push executor is, minus everything that is
the worker's own work: one ``ClientSession``, ``DummyCookieJar``, no default headers, URLs built
once, a fixed pool of sender tasks, the same small body a benchmark job carries; and the
worker's garbage-collector settings (:func:`worker.main.tune_gc`), which matter at 256 requests
at once.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time

import aiohttp
import uvloop
from yarl import URL

from worker.main import tune_gc

BODY = b'{"bench":true,"n":1}'


async def _sender(
    session: aiohttp.ClientSession,
    urls: itertools.cycle[URL],
    deadline: float,
    counts: list[int],
) -> None:
    ok = failed = 0
    while time.perf_counter() < deadline:
        async with session.post(next(urls), data=BODY) as r:
            await r.read()
            if r.status == 200:
                ok += 1
            else:
                failed += 1
    counts[0] += ok
    counts[1] += failed


async def run(base: str, topics: int, concurrency: int, duration_s: float) -> dict[str, float]:
    urls = itertools.cycle([URL(f"{base}/t/c{i:05d}") for i in range(topics)])
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent",),
        auto_decompress=False,
    ) as session:
        warm = time.perf_counter() + 0.5  # open the connections before the clock starts
        await asyncio.gather(*(_sender(session, urls, warm, [0, 0]) for _ in range(concurrency)))
        counts = [0, 0]
        start, cpu = time.perf_counter(), time.process_time()
        deadline = start + duration_s
        await asyncio.gather(
            *(_sender(session, urls, deadline, counts) for _ in range(concurrency))
        )
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "requests": counts[0],
        "failed_requests": counts[1],
        "seconds": round(elapsed, 3),
        "requests_per_s": round(counts[0] / elapsed, 1),
        "cpu_us_per_request": round(cpu / max(1, counts[0]) * 1e6, 1),
        "concurrency": concurrency,
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m emq.bench.ceiling")
    p.add_argument("base", help="the sink's base URL (http://127.0.0.1:PORT)")
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--duration-s", type=float, default=5.0)
    a = p.parse_args()
    tune_gc()
    json.dump(uvloop.run(run(a.base, a.topics, a.concurrency, a.duration_s)), sys.stdout)


if __name__ == "__main__":
    main()

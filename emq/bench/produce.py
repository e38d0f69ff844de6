"""The README's producer loop as a load generator, run in its own process by ``emq bench
enqueue``: ``await producer.send(job)`` in a plain loop, one Producer with its defaults.

    python -m emq.bench.produce BASE_URL TOKEN TENANT TOPIC --jobs 100000 [--loop uvloop]

Prints one JSON object: jobs, seconds (from the first send until ``async with`` returned, so
every job is answered), jobs/s, requests and the jobs not accepted. ``--loop asyncio`` (the
default) is what the README's ``asyncio.run`` gives; ``uvloop`` shows what a faster loop adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import uvloop

from emq.client import Client, JobsRejected

URL = "https://example.com/hook"


async def run(base: str, token: str, tenant: str, topic: str, jobs: int) -> dict[str, Any]:
    client = Client(base, token)
    rejected = 0
    start = time.perf_counter()
    try:
        async with client, client.producer(tenant, topic) as producer:
            for n in range(jobs):
                await producer.send({"url": URL, "body": {"order": n, "status": "paid"}})
    except JobsRejected as e:
        rejected = len(e.rejected)
    elapsed = time.perf_counter() - start
    return {
        "jobs": jobs,
        "seconds": round(elapsed, 3),
        "jobs_per_s": round(jobs / elapsed, 1),
        "accepted": producer.accepted,
        "rejected": rejected,
        "requests": producer.requests,
        "retried": producer.throttled + producer.unavailable,
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m emq.bench.produce")
    p.add_argument("base")
    p.add_argument("token")
    p.add_argument("tenant")
    p.add_argument("topic")
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    a = p.parse_args()
    runner = uvloop.run if a.loop == "uvloop" else asyncio.run
    result = runner(run(a.base, a.token, a.tenant, a.topic, a.jobs))
    json.dump(result | {"loop": a.loop}, sys.stdout)


if __name__ == "__main__":
    main()

"""The README's producer loop as a load generator, run in its own process by ``emq bench
enqueue``: ``await producer.send(job)`` in a plain loop, one Producer with its defaults.

    python -m emq.bench.produce BASE_URL TOKEN TENANT TOPIC --jobs 100000 [--loop uvloop]
        [--idempotent]

Prints one JSON object: jobs, seconds (from the first send until ``async with`` returned, so
every job is answered), jobs/s, requests, the jobs not accepted and the client's own CPU time.
``--loop asyncio`` (the default) is what the README's ``asyncio.run`` gives; ``uvloop`` shows
what a faster loop adds.
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


async def run(
    base: str, token: str, tenant: str, topic: str, jobs: int, idempotent: bool = False
) -> dict[str, Any]:
    client = Client(base, token)
    rejected = 0
    start, cpu = time.perf_counter(), time.process_time()
    try:
        async with client, client.producer(tenant, topic, idempotent=idempotent) as producer:
            for n in range(jobs):
                await producer.send({"url": URL, "body": {"order": n, "status": "paid"}})
    except JobsRejected as e:
        rejected = len(e.rejected)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    return {
        "jobs": jobs,
        "seconds": round(elapsed, 3),
        "jobs_per_s": round(jobs / elapsed, 1),
        "accepted": producer.accepted,
        "rejected": rejected,
        "requests": producer.requests,
        "retried": producer.throttled + producer.unavailable,
        # the client's own CPU: far below ``seconds`` means the API is what bounds the rate
        "client_cpu_s": round(cpu, 3),
        "client_cpu_us_per_job": round(cpu / jobs * 1e6, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m emq.bench.produce")
    p.add_argument("base")
    p.add_argument("token")
    p.add_argument("tenant")
    p.add_argument("topic")
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    p.add_argument("--idempotent", action="store_true", help="a key per job (see Producer)")
    a = p.parse_args()
    runner = uvloop.run if a.loop == "uvloop" else asyncio.run
    result = runner(run(a.base, a.token, a.tenant, a.topic, a.jobs, a.idempotent))
    json.dump(result | {"loop": a.loop, "idempotent": a.idempotent}, sys.stdout)


if __name__ == "__main__":
    main()

"""Hostile endpoints through a real worker (invariant 9): real Redis and ZooKeeper, a real
``emq worker`` process (its default, the lean client), the API's job status.

On one host:port, tenant acme's endpoint answers every request with a complete 200 and the start
of a second response in the same write; tenant globex's answers 500. Another endpoint of acme
answers with a header that never ends, eight requests at once. A neighbour topic on a
well-behaved endpoint is delivered meanwhile. Then: every lying 200 delivered, no 500 delivered
(globex's jobs all in the DLQ with ``HTTP 500``), no connection with stray bytes reused, every
endless-header job in the DLQ with a readable protocol error (in its job status too), the
neighbour at its rate, the worker alive and small, the errors on ``/metrics``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from emq.core.model import GroupRef, Tenant, Topic
from emq.stack import free_port
from tests.worker.conformance.cases import E500, OK, PARTIAL, by_path
from tests.worker.conformance.hostile import Hostile, Reply, Stray, Stream
from tests.worker.conftest import Sink, Stack, fast_retry, full_seconds
from tests.worker.test_job_status import ADMIN, Http, _scraper, _until, _until_up, _value, api

__all__ = ["api"]  # (the fixture, from the job status tests)

LIES, HONEST, ENDLESS = 60, 60, 48  # (the endless ones: 3 s at their quota, 8 at once)
NEIGHBOUR_QPS = 40
MIB = 1024 * 1024


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def _dead(stack: Stack, topic: Topic) -> list[Any]:
    letters: list[Any] = []
    for group in range(topic.groups):
        letters += await stack.queues.list_dead(GroupRef(topic.ref, group), None, 1000)
    return letters


async def test_lying_and_endless_endpoints_decide_nothing_but_their_own_jobs(
    stack: Stack, sink: Sink, api: Http, worker_process: Any
) -> None:
    await stack.config.create_tenant(Tenant("globex", "Globex", "1" * 64, time.time()))
    globex = replace(stack, tenant="globex", topics={})
    endless = [b"HTTP/1.1 200 OK\r\nX-Endless: ", Stream(b"a" * 65536, 256 * MIB)]
    script = by_path(
        {
            "/lie": lambda c, i, p: Reply([Stray(PARTIAL, OK)], True),
            "/honest": lambda c, i, p: Reply([E500], False),
            "/endless": lambda c, i, p: Reply(endless, False),
        }
    )
    async with Hostile(script).serving() as hostile:
        await stack.topic("liar", 50, retry=fast_retry(1))
        await globex.topic("honest", 50, retry=fast_retry(1))
        await stack.topic("endless", 16, retry=fast_retry(1), endpoint_concurrency=8)
        await stack.topic("neighbour", NEIGHBOUR_QPS)
        liar, honest_topic = stack.topics["liar"], globex.topics["honest"]
        endless_topic = stack.topics["endless"]
        port = free_port()
        worker = worker_process(EMQ_WORKER_METRICS_PORT=str(port))
        scrape = _scraper(f"http://127.0.0.1:{port}/metrics")
        await _until_up(scrape)
        rss_before = _rss_bytes(worker.proc.pid)

        neighbour = [{"url": sink.url("neighbour"), "body": {"n": i}} for i in range(240)]
        await stack.enqueue("neighbour", neighbour)
        await asyncio.sleep(1.0)  # (the neighbour's pace before the hostile ones start)
        for _ in range(0, LIES, 10):  # interleaved on one host:port
            await stack.enqueue("liar", [{"url": hostile.url("/lie")}] * 10)
            await globex.enqueue("honest", [{"url": hostile.url("/honest")}] * 10)
        endless_ids = await stack.enqueue("endless", [{"url": hostile.url("/endless")}] * ENDLESS)

        async def settled() -> bool:
            dead = len(await _dead(stack, honest_topic))
            dead_endless = len(await _dead(stack, endless_topic))
            delivered = sum(s.ok for s in hostile.seen)
            return dead == HONEST and dead_endless == ENDLESS and delivered >= LIES

        deadline = time.monotonic() + 30
        while not await settled() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        rss_after = _rss_bytes(worker.proc.pid)
        assert await sink.wait_for(lambda: len(sink.of("neighbour")) >= len(neighbour), 20)
        metrics = await _until(
            scrape,
            lambda m: (
                _value(m, "emq_jobs_delivered_total", topic="liar") >= LIES
                and _value(m, "emq_push_protocol_errors_total", topic="endless") >= ENDLESS
            ),
        )

    # No false delivered, none lost: every lie was a complete 200 (delivered); every 500 is dead.
    honest = await _dead(stack, honest_topic)
    assert len(honest) == HONEST and {d.error for d in honest} == {"HTTP 500"}, honest[:3]
    assert _value(metrics, "emq_jobs_delivered_total", topic="honest") == 0
    assert _value(metrics, "emq_jobs_delivered_total", topic="liar") == LIES
    assert await _dead(stack, liar) == []
    assert hostile.reused_after_stray == [], hostile.reused_after_stray
    # Every endless head ended at the head's limit, with a readable reason in the DLQ and status.
    letters = await _dead(stack, endless_topic)
    assert len(letters) == ENDLESS, letters
    assert all("protocol: response head larger than the limit" in d.error for d in letters)
    r = await api.get(f"/v1/tenants/acme/topics/endless/jobs/{endless_ids[0]}", headers=ADMIN)
    body = await r.json()
    assert body["state"] == "dead" and body["error"].startswith("protocol: "), body
    # The operator's signal.
    assert _value(metrics, "emq_push_protocol_errors_total", topic="liar", reason="stray_bytes")
    errors = _value(metrics, "emq_push_protocol_errors_total", topic="endless")
    assert errors == _value(metrics, "emq_push_protocol_errors_total", reason="head_too_large")
    assert errors >= ENDLESS
    # The worker: alive, small, and its neighbour kept its pace.
    assert worker.proc.poll() is None, worker.log()
    assert rss_after - rss_before < 64 * MIB, (rss_before, rss_after)
    seconds = full_seconds(sink.per_second("neighbour"))
    assert len(seconds) >= 4 and min(seconds) > 0, seconds
    assert sum(seconds) / len(seconds) >= 0.7 * NEIGHBOUR_QPS, seconds

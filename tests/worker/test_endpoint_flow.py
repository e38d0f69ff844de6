"""Per-endpoint flow control end to end: a worker process, real Redis and ZooKeeper, real HTTP
sinks (one per endpoint: an endpoint is a host:port), the status board the API reads.

Scaled down from ``emq bench endpoints`` (quota 100, the limited endpoint at 60/s): quota 40,
the limited endpoint at 20/s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from emq.api.jobs import job_status
from emq.compose import open_endpoint_board, open_jobs
from emq.core.endpoints import EndpointBoard, EndpointPolicy, endpoint_of
from emq.core.model import GroupRef, TopicRef
from emq.core.settings import Settings
from emq.rigs.sink import Sink
from tests.worker.conftest import Stack, fast_retry

SETTLE_S = 3.0  # the rate starts at the quota (40): a few cuts bring it under the limit (20)


@pytest.fixture
async def board(settings: Settings) -> AsyncIterator[EndpointBoard]:
    b = open_endpoint_board(settings)
    yield b
    await b.aclose()


@pytest.fixture
async def limited_sink() -> AsyncIterator[Sink]:
    async with Sink(record=True).serving() as s:  # (a log of every request, with its status)
        yield s


@pytest.fixture
async def other_sink() -> AsyncIterator[Sink]:
    async with Sink().serving() as s:
        yield s


async def _status(board: EndpointBoard, ref: TopicRef, endpoint: str) -> dict[str, Any]:
    rows = [r for r in await board.read(str(ref)) if r["endpoint"] == endpoint]
    return rows[0] if rows else {}


@pytest.mark.serial
async def test_a_rate_limited_endpoint_is_paced_and_retry_after_holds_a_whole_endpoint(
    stack: Stack,
    limited_sink: Sink,
    other_sink: Sink,
    sink: Sink,
    board: EndpointBoard,
    worker_process: Any,
) -> None:
    """One worker, two topics: "ad" (quota 40) sends three quarters of its jobs to an endpoint
    that answers 429 above 20/s, the rest to another; "ra" (quota 5) meets a 429 with
    ``Retry-After: 2``."""
    policy = EndpointPolicy(adaptive=True, increase_qps=1.0)
    ref = await stack.topic("ad", 40, endpoints=policy, retry=fast_retry(8, 0.5))
    limited = f"{limited_sink.base}/limit/20/a"
    jobs = [{"url": limited if i % 4 else other_sink.url("b")} for i in range(240)]
    await stack.enqueue("ad", jobs)
    await stack.topic("ra", 5, endpoints=EndpointPolicy(adaptive=True), retry=fast_retry(8, 0.1))
    sink.behaviour["ra"].status = 429
    sink.behaviour["ra"].retry_after = "2"
    held = await stack.enqueue("ra", [{"url": sink.url("ra")} for _ in range(6)])
    worker_process()
    assert await sink.wait_for(lambda: sink.first_attempt_at, 10)
    first = min(sink.first_attempt_at.values())
    await asyncio.sleep(0.5)
    sink.behaviour["ra"].status = 200

    _check_retry_after(sink, held, first, await sink.wait_for(lambda: len(sink.of("ra")) == 6, 15))
    await _check_paced(stack, limited_sink, other_sink, board, ref, limited)


def _check_retry_after(sink: Sink, ids: list[str], first: float, delivered: bool) -> None:
    """At 5/s, jobs would have gone every 0.2 s; the endpoint was held for the 2 s instead (the
    jobs in flight with the first one, at most a tick later, are answered 429 too)."""
    assert delivered and {d.job_id for d in sink.of("ra")} == set(ids)
    later = sorted(t - first for t in sink.first_attempt_at.values() if t - first > 0.1)
    assert later and later[0] >= 1.9, later
    assert sum(sink.attempts[i] for i in ids) <= len(ids) + 2  # held jobs burnt no attempt


async def _check_paced(
    stack: Stack, sink: Sink, other_sink: Sink, board: EndpointBoard, ref: TopicRef, limited: str
) -> None:
    a = sink.stats.per_second["a"]
    assert await sink.wait_for(lambda: sum(a.values()) >= 120, 20)
    seconds = sorted(a)[int(SETTLE_S) : -1]  # after the first cuts, whole seconds only
    assert seconds and max(a[s] for s in seconds) <= 22, dict(a)
    # The other endpoint is never held up by the first: it kept at least its share of the
    # stream (a quarter of the jobs) and drained before the limited one.
    assert len(other_sink.of("b")) == 60
    # Deliveries are the truth: once adapted (after the first cuts from the quota), the 429s
    # are a small part of the requests.
    log = [(at, status) for at, topic, _, status, _ in sink.stats.log if topic == "a"]
    settled = [status for at, status in log if at >= log[0][0] + SETTLE_S]
    assert settled.count(429) < 0.05 * len(settled), (settled.count(429), len(settled), dict(a))
    throttled = sink.stats.throttled["a"]
    shown = await _status(board, ref, endpoint_of(limited))
    assert shown["state"] in ("limited", "open") and shown["throttled"] == throttled
    assert "429 at" in shown["reason"] or shown["state"] == "open"
    dead = await stack.queues.list_dead(GroupRef(ref, 0), None, 10)
    assert dead == []


async def test_an_endpoint_that_keeps_failing_is_disabled_and_its_jobs_held_until_enabled(
    stack: Stack, sink: Sink, board: EndpointBoard, worker_process: Any
) -> None:
    policy = EndpointPolicy(disable_after=4, disable_after_s=1)
    ref = await stack.topic("down", 100, endpoints=policy, retry=fast_retry(30, 0.1))
    sink.behaviour["down"].status = 500
    ids = await stack.enqueue("down", [{"url": sink.url("down")} for _ in range(5)])
    worker_process()
    endpoint = endpoint_of(sink.url("down"))

    async def state() -> str:
        return str((await _status(board, ref, endpoint)).get("state"))

    deadline = time.monotonic() + 15
    while await state() != "disabled" and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    shown = await _status(board, ref, endpoint)
    assert shown["state"] == "disabled" and shown["reason"].startswith("disabled after")
    await asyncio.sleep(0.6)  # retries in flight when it was disabled end
    tried = sum(sink.attempts[i] for i in ids)
    await asyncio.sleep(1.5)
    assert sum(sink.attempts[i] for i in ids) == tried  # held: nothing more is sent
    assert await stack.queues.list_dead(GroupRef(ref, 0), None, 10) == []
    # Job status tells why: held by a disabled endpoint (never no_owner), with no promise of when
    jobs = open_jobs(stack.settings)
    try:
        shown_jobs = [await job_status(jobs, stack.topics["down"], i) for i in ids]
    finally:
        await jobs.aclose()
    waiting = [j for j in shown_jobs if j["state"] in ("buffered", "queued")]
    assert waiting, shown_jobs
    for j in waiting:
        assert j["reason"]["code"] == "endpoint_disabled", j
        assert endpoint in j["reason"]["detail"] and j.get("eta_s") is None
    sink.behaviour["down"].status = 200
    topic = stack.topics["down"]
    marked = topic.endpoints.enabled(endpoint, int(time.time() * 1000))
    await stack.update("down", endpoints=replace(marked))
    assert await sink.wait_for(lambda: {d.job_id for d in sink.of("down")} == set(ids), 15)
    assert await stack.queues.list_dead(GroupRef(ref, 0), None, 10) == []

"""Lending between a topic's groups on one worker (worker.lending): a backlog held by some of
a topic's groups is sent at the topic's quota, not at those groups' shares, and no window of a
second holds more than the quota (+1 per group) while lending starts, or stops when the lender
gets jobs of its own; the lender then sends at its own share at once.

A worker on the in-memory backends and a pusher that answers at once, recording each send's
time: the pacing judged is the worker's own; then the same on the real parts (a worker process,
Redis, a sink on loopback), judged from the sink's arrivals."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from emq.api.enqueue import Enqueuer, jump_hash
from emq.core.interfaces import Pusher, PushRequest, PushResult
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from tests.worker.conftest import LoopGaps, Sink, Stack, full_seconds, worker_in_loop

QPS = 300  # two groups of 150


class _Recording(Pusher):
    def __init__(self) -> None:
        self.sent: list[tuple[float, str]] = []

    async def push(self, request: PushRequest) -> PushResult:
        self.sent.append((time.time(), request.url))
        return PushResult(200, 0.0005)

    async def aclose(self) -> None:
        return None


def _pins(group: int, n: int) -> list[str]:
    """``n`` idempotency keys that hash to ``group`` of two (they pin a job's group)."""
    pins: list[str] = []
    i = 0
    while len(pins) < n:
        if jump_hash(f"p{i}", 2) == group:
            pins.append(f"p{i}")
        i += 1
    return pins


def _jobs(group: int, n: int) -> list[dict[str, str]]:
    return [{"url": f"https://r.example/g{group}", "idempotency_key": p} for p in _pins(group, n)]


def _busiest_window(times: list[float]) -> int:
    times = sorted(times)
    j, most = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - 1.0:
            j += 1
        most = max(most, i - j + 1)
    return most


async def test_one_groups_backlog_goes_at_the_topic_quota_and_its_lender_keeps_its_share() -> None:
    queues, config = MemoryQueueBackend(), MemoryConfigStore()
    ref = TopicRef(Namespace.ONLINE, "acme", "keyed")
    await config.create_tenant(Tenant("acme", "", "0" * 64, 0.0))
    await config.create_topic(Topic(ref, QPS, 2))
    enqueuer = Enqueuer(config, queues)
    await enqueuer.enqueue(ref, _jobs(0, 1500), batch=True)  # all in group 0
    pusher = _Recording()
    async with LoopGaps() as gaps, worker_in_loop(config, queues, pusher) as running:
        while len(pusher.sent) < 900:  # three seconds at the quota, one and a half without
            assert not running.done(), running
            await asyncio.sleep(0.02)
        woken = time.time()  # group 1, idle and lending until now, gets jobs of its own
        await enqueuer.enqueue(ref, _jobs(1, 300), batch=True)
        while sum(url.endswith("g1") for _, url in pusher.sent) < 300:
            assert not running.done(), running
            assert time.time() < woken + 10, Counter(int(t) for t, _ in pusher.sent)
            await asyncio.sleep(0.02)

    times = [t for t, _ in pusher.sent]
    assert _busiest_window(times) <= QPS + 2  # the topic's promise, lending or not
    first = times[0]
    lent = [t for t, url in pusher.sent if first + 0.5 <= t < woken and url.endswith("g0")]
    # The pace is judged over the time this loop ran: a stall of the test process (the
    # machine, a collection) is no pace of the worker's, and it does not catch up on purpose.
    span = woken - first - 0.5 - gaps.lost(first + 0.5, woken)
    assert len(lent) / span >= 0.9 * QPS, (len(lent), span)  # group 0 alone: the whole quota
    g1 = sorted(t for t, url in pusher.sent if url.endswith("g1"))
    assert g1[0] - woken < 0.5, g1[0] - woken  # its own jobs go at once (no burst: its pace)
    in_its_first_second = sum(1 for t in g1 if t < g1[0] + 1.0)
    ran = 1.0 - gaps.lost(g1[0], g1[0] + 1.0)
    assert ran > 0.5, gaps.gaps  # (else the second says nothing of the worker's pace)
    assert in_its_first_second >= 0.85 * QPS / 2 * ran, (in_its_first_second, ran)  # its share
    # While group 1 has jobs of its own (a second after its first, until its last), group 0
    # sends at its own share: nothing is lent by a group with jobs.
    g0_meanwhile = [
        t for t, url in pusher.sent if url.endswith("g0") and g1[0] + 1.0 <= t <= g1[-1] - 0.1
    ]
    assert len(g0_meanwhile) >= 0.8 * QPS / 2 * (g1[-1] - 0.1 - g1[0] - 1.0)
    assert _busiest_window(g0_meanwhile) <= QPS // 2 + 1


@pytest.mark.serial  # judges rates at a sink
async def test_on_the_real_parts_a_keyed_backlog_in_one_group_is_sent_at_the_topic_quota(
    stack: Stack, sink: Sink, worker_process: Any
) -> None:
    # Three keys, all in group 0 of the topic's two: order per key pins them there.
    keys = _pins(0, 3)
    await stack.topic("keyed", QPS)
    jobs = [{"url": sink.url("keyed"), "key": keys[i % 3]} for i in range(QPS * 5)]
    await stack.enqueue("keyed", jobs)
    worker = worker_process()
    assert await sink.wait_for(lambda: len(sink.of("keyed")) >= QPS * 4, 20), worker.log()
    times = [d.at for d in sink.of("keyed")]
    seconds = full_seconds(sink.per_second("keyed"))
    assert seconds and min(seconds) >= 0.9 * QPS, seconds  # not 150: group 1 lends its share
    assert _busiest_window(times) <= QPS + 2, seconds

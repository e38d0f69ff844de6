"""Isolation from slow and hanging endpoints, however many (invariant 3 of ARCHITECTURE.md).

A real worker process, real Redis, a loopback HTTP sink whose endpoints hang (never answer),
answer late or answer at once. The hanging and slow topics together can hold far more requests
than the worker has senders; the healthy topics must keep their quota all the same.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import time
from typing import Any

import pytest

from emq.core.interfaces import PushRequest
from tests.worker.conftest import Sink, Stack, full_seconds
from worker.pushers import HTTP_CLIENTS, make_pusher
from worker.settings import WorkerSettings
from worker.ssrf import AddressPolicy

pytestmark = pytest.mark.serial  # judges timing: `make test` runs it alone

SENDERS = 16
HANGING = [f"hang{i}" for i in range(10)]
SLOW = [f"slow{i}" for i in range(5)]
HEALTHY = ["ok1", "ok2"]
CONCURRENCY = 4  # per hanging or slow topic: 10 x 4 hanging + 5 x 4 slow = 60 > 16 senders
QPS = 100


def jobs(sink: Sink, topic: str, n: int) -> list[dict[str, Any]]:
    return [{"url": sink.url(topic), "body": {"n": i}} for i in range(n)]


async def test_healthy_topics_keep_their_quota_beside_more_hanging_requests_than_senders(
    stack: Stack, sink: Sink, worker_process: Any
) -> None:
    for name in HANGING + SLOW:
        await stack.topic(name, 50, endpoint_concurrency=CONCURRENCY)
        sink.behaviour[name].hang = name in HANGING
        sink.behaviour[name].delay_s = 1.0 if name in SLOW else 0.0
        await stack.enqueue(name, jobs(sink, name, 60))
    for name in HEALTHY:
        await stack.topic(name, QPS)
        await stack.enqueue(name, jobs(sink, name, 1500))
    # A 2 s request timeout (the rig's): the hanging requests time out and are retried three
    # times while the healthy topics are counted, each time a wave of fresh hanging requests.
    worker = worker_process(EMQ_WORKER_SENDERS=str(SENDERS), EMQ_WORKER_SENDERS_MIN=str(SENDERS))
    assert await sink.wait_for(lambda: len(sink.of("ok1")) >= 9 * QPS, 20), worker.log()
    assert sink.max_hanging == len(HANGING) * CONCURRENCY  # each held its own endpoint's share
    for name in HEALTHY:
        # Not the first two whole seconds: until the worker has seen pushes to the hanging
        # endpoints run past half a second, their first requests hold every sender, and the
        # healthy jobs handed out meanwhile (their quota taken) arrive late, in the next second.
        seconds = full_seconds(sink.per_second(name))[2:]
        assert len(seconds) >= 5, (name, sink.per_second(name))
        assert sum(seconds) / len(seconds) >= 0.95 * QPS, (name, seconds)
        assert min(seconds) >= 0.8 * QPS, (name, seconds)  # (a shared machine stalls at times)
        assert max(seconds) <= QPS * 1.05, (name, seconds)  # as the quota test allows
    for name in SLOW:  # 4 at a time, 1 s each: about 4/s, their endpoints' own limit
        assert len(sink.of(name)) >= 4 * 5, (name, len(sink.of(name)))


@pytest.mark.parametrize("client", HTTP_CLIENTS)
async def test_a_connect_that_hangs_ends_at_the_connect_timeout_not_the_total(client: str) -> None:
    # A listener whose accept queue is full drops further SYNs: a connect that never completes,
    # as to a host that has vanished behind a firewall.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        settings = WorkerSettings(connect_timeout_s=0.3, request_timeout_s=10.0, http_client=client)
        policy = AddressPolicy((ipaddress.ip_network("127.0.0.0/8"),))
        async with make_pusher(settings, policy) as pusher:
            start = time.monotonic()
            result = await pusher.push(
                PushRequest(f"http://127.0.0.1:{port}/x", "POST", {}, b"{}", "t")
            )
        assert result.status == 0 and result.error == "timed out", result
        assert time.monotonic() - start < 2.0
    finally:
        for s in fillers:
            s.close()
        listener.close()

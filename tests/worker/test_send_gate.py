"""A push that waits for its connection is granted again when it is written (worker.runtime
``_gate``): the quota counts a request when the receiver can see it, not when it was handed
to a sender. Before the gate, a far endpoint's slow first connects (resolving, TCP, TLS: every
push opens one until the first is ready) sent the grants of that wait in one bunch, then the
steady pace on top: a sliding second at the receiver held far over the quota.

A worker on the in-memory backends and a pusher whose connections take ``CONNECT_S`` to open
(the lean client's behaviour, without a network: the gate's logic is the worker's)."""

from __future__ import annotations

import asyncio
import time

import pytest

from emq.bench.promises import busiest_window
from emq.core.interfaces import NotSent, Pusher, PushRequest, PushResult
from tests.worker.conftest import push_backlog
from worker.groups import TopicStats

QPS = 10
CONNECT_S = 0.6
JOBS = 25
WAITED_S = 0.01  # past LATE_S: its grant is moved at the gate
STARVED_S = 0.25  # past worker.groups.STARVED_S with room to spare: counted as a late send


class _SlowConnects(Pusher):
    """Until its first connection is open (``CONNECT_S`` after the first push) every push
    opens one of its own and waits as long; then each asks its gate, as the lean client does
    (``obey_gate`` False: a client that writes whatever happened meanwhile)."""

    def __init__(self, obey_gate: bool) -> None:
        self.obey_gate = obey_gate
        self.ready_at: float | None = None
        self.sent: list[tuple[float, str]] = []
        self.refused = 0
        self.waited = 0  # pushes that waited WAITED_S or more for their connection
        self.starved = 0  # ... STARVED_S or more

    async def push(self, request: PushRequest) -> PushResult:
        now = time.time()
        if self.ready_at is None:
            self.ready_at = now + CONNECT_S
        if now < self.ready_at:
            self.waited += self.ready_at - now >= WAITED_S
            self.starved += self.ready_at - now >= STARVED_S
            await asyncio.sleep(self.ready_at - now)
            if self.obey_gate and request.gate is not None and not request.gate():
                self.refused += 1
                raise NotSent
        self.sent.append((time.time(), request.url))
        return PushResult(200, 0.001)

    async def aclose(self) -> None:
        return None


async def _run(obey_gate: bool) -> tuple[_SlowConnects, TopicStats]:
    pusher = _SlowConnects(obey_gate)
    pushed = lambda: len(pusher.sent)  # noqa: E731
    stats = await push_backlog("far", QPS, JOBS, pusher, pushed, senders=16, senders_min=16)
    return pusher, stats


@pytest.mark.parametrize("obey_gate", [True, False])
async def test_pushes_that_waited_for_a_connection_keep_every_second_within_the_quota(
    obey_gate: bool,
) -> None:
    pusher, stats = await _run(obey_gate)
    urls = [url for _, url in pusher.sent]
    assert sorted(urls) == sorted(f"https://far.example/{i}" for i in range(JOBS))  # once each
    busiest = busiest_window(sorted(at for at, _ in pusher.sent))
    if obey_gate:
        assert pusher.refused == 0  # each waited less than a window: granted again, sent
        # ... and counted (emq_quota_grants_moved_total{reason="late_send"}) when the wait
        # was long, as a starved worker's would be; the pushes that did not wait were moved
        # too (back-dated grants, a loop turn to reach a sender) but are not counted: the
        # metric says a worker is short of CPU
        assert pusher.waited >= stats.moved_late_send >= pusher.starved > 0
        assert busiest <= QPS + 1, busiest  # the promise: qps (+1 per group) in any 1000 ms
    else:  # what the gate prevents, so that this test can tell
        assert busiest >= QPS + 4, busiest

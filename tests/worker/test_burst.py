"""Burst on the real parts: after idle a topic with ``burst`` sends that many jobs above its
pace, and no sliding 1 s window (as the sink saw) holds more than ``qps + burst + groups``
(README "Burst"); without a burst the sliding-window promise is what it always was."""

from __future__ import annotations

import time
from typing import Any

import pytest

from emq.bench.promises import Quota, busiest_window, quota_figures
from tests.worker.conftest import Sink, Stack

pytestmark = pytest.mark.serial  # judges timing: `make test` runs it alone

QPS, BURST = 50, 30


async def test_a_burst_after_idle_stays_within_its_documented_bound(
    stack: Stack, sink: Sink, worker_process: Any
) -> None:
    await stack.topic("bursty", QPS, burst=BURST)
    await stack.topic("plain", QPS)
    worker = worker_process()
    for name in ("bursty", "plain"):  # one job each: the worker is up and owns both
        await stack.enqueue(name, [{"url": sink.url(name)}])
    assert await sink.wait_for(lambda: len(sink.deliveries) >= 2, 30), worker.log()
    idle_from = max(d.at for d in sink.deliveries)
    assert await sink.wait_for(lambda: time.time() > idle_from + 1.5, 3)  # idle: burst back
    sink.deliveries.clear()
    for name in ("bursty", "plain"):
        await stack.enqueue(name, [{"url": sink.url(name)} for _ in range(QPS * 4)])
    assert await sink.wait_for(lambda: len(sink.deliveries) >= 2 * QPS * 4, 15), worker.log()

    bursty = sorted(d.at for d in sink.of("bursty"))
    plain = sorted(d.at for d in sink.of("plain"))
    first = [t for t in bursty if t < bursty[0] + 1.0]
    print(f"burst: first second {len(first)}, busiest window {busiest_window(bursty)}")
    assert len(first) >= QPS + BURST * 0.9  # the burst was used at once
    assert busiest_window(bursty) <= QPS + BURST + 1  # the documented bound (one group)
    assert busiest_window(plain) <= QPS + 1  # no burst: the promise of old
    assert quota_figures(bursty, Quota(QPS, 1, BURST))["within"]
    assert not quota_figures(bursty, Quota(QPS, 1))["within"]  # (the checker needs the burst)
    steady = [t for t in bursty if bursty[0] + 2.0 <= t < bursty[0] + 3.0]
    assert len(steady) <= QPS + 1  # then the steady pace: the burst is not a higher rate

"""Stopping a worker (a real ``emq worker`` process): the first SIGTERM drains its buffers for
the shutdown grace; a second one stops it at once, and what it left is delivered by the next
worker from the checkpoint: nothing is lost."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

from tests.worker.conftest import Sink, Stack

JOBS = 400


async def test_a_second_sigterm_stops_the_drain_at_once_and_loses_nothing(
    stack: Stack, sink: Sink, worker_process: Any
) -> None:
    await stack.topic("stop2", 50)  # 400 jobs: 8 s at its quota, more than the test waits
    ids = set(await stack.enqueue("stop2", [{"url": sink.url("stop2")} for _ in range(JOBS)]))
    first = worker_process("w1", EMQ_WORKER_SHUTDOWN_GRACE_S="30")
    assert await sink.wait_for(lambda: len(sink.of("stop2")) >= 25, 15), first.log()
    first.signal(signal.SIGTERM)
    await asyncio.sleep(0.5)
    assert first.alive, first.log()  # draining its buffers, for up to 30 s
    asked = time.monotonic()
    first.signal(signal.SIGTERM)
    assert first.wait(10) == 0, first.log()
    assert time.monotonic() - asked < 5, first.log()  # not the 30 s of the grace
    assert "draining no more" in first.log()
    assert len({d.job_id for d in sink.of("stop2")}) < JOBS  # it did leave work behind

    await stack.update("stop2", qps=1000)  # (the rest quickly)
    second = worker_process("w2")
    assert await sink.wait_for(lambda: {d.job_id for d in sink.of("stop2")} >= ids, 20), (
        second.log()
    )

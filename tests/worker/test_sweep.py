"""The sweep, on real Redis and a real worker process: a job whose ready signal was lost is
found by the next sweep (GroupOwner.unread: the worker asks which of its queues hold a job past
what it fetched, and reads only those)."""

from __future__ import annotations

from typing import Any

from tests.worker.conftest import Sink, Stack


async def test_a_job_whose_ready_signal_was_lost_is_delivered_by_the_sweep(
    stack: Stack, sink: Sink, worker_process: Any
) -> None:
    await stack.topic("lost", 10)
    await stack.topic("idle", 10)
    worker = worker_process(EMQ_WORKER_SWEEP_INTERVAL_S="1")
    await stack.enqueue("lost", [{"url": sink.url("lost")}])
    await stack.enqueue("idle", [{"url": sink.url("idle")}])
    assert await sink.wait_for(lambda: len(sink.of("lost")) + len(sink.of("idle")) == 2, 30), (
        worker.log()
    )
    # Both groups read to their end (exhausted, not hot): only a signal or the sweep reads
    # them again. The next put's ready signals are lost on the way.
    queues: Any = stack.queues
    queues._hint_commands = lambda hints: []
    await stack.enqueue("lost", [{"url": sink.url("lost")} for _ in range(3)])
    assert await sink.wait_for(lambda: len(sink.of("lost")) == 4, 15), worker.log()
    assert len(sink.of("idle")) == 1 and worker.alive

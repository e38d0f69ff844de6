"""A worker whose Redis is a network hop away (:mod:`emq.rigs.netdelay` at 2 ms round trip, the
proxy in its own process as the benchmarks run it) delivers every job once."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from emq.rigs.netdelay import DelayProcess
from emq.stack import free_port
from tests.worker.conftest import Sink, Stack


async def test_a_worker_behind_a_delaying_proxy_delivers_every_job_once(
    stack: Stack, sink: Sink, worker_process: Any, tmp_path: Path
) -> None:
    redis = urlsplit(stack.settings.redis_url)
    assert redis.hostname is not None and redis.port is not None
    hop = DelayProcess(free_port(), (redis.hostname, redis.port), 2.0, tmp_path / "hop.log")
    await hop.start()
    try:
        await stack.topic("hop", 100)
        ids = await stack.enqueue(
            "hop", [{"url": sink.url("hop"), "body": {"n": i}} for i in range(120)]
        )
        url = f"redis://127.0.0.1:{hop.port}{redis.path}"
        # Redis only through the hop; a short grace: the test's teardown has nothing to drain
        worker = worker_process(EMQ_REDIS_URL=url, EMQ_WORKER_SHUTDOWN_GRACE_S="1")
        assert await sink.wait_for(lambda: len(sink.of("hop")) >= len(ids), 20), worker.log()
        delivered = [d.job_id for d in sink.of("hop")]
        assert sorted(delivered) == sorted(ids)  # each once
        assert hop.proc.alive, hop.proc.log()
    finally:
        hop.stop()

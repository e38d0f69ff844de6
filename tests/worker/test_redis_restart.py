"""A Redis restart under a running worker and API (issue 11, items 1 and 2), on real processes.

Redis is this test's own (``own_redis``): killed with SIGKILL (a crash, AOF everysec) or shut
down cleanly, then started again on the same data. The worker (``emq worker --standalone``, a
subprocess) must stay alive, its ``/healthz`` must say 503 while Redis is gone and ok after,
topics created during the outage and after the restart must be claimed, and every job
accepted before and after must reach the sink. The API (in this process, its own connection
pool) must answer its first enqueues after the restart with 202, not 503 on stale pooled
connections.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from capacity.split import DEFAULT_MAX_GROUP_QPS
from emq.compose import open_queues
from emq.core.settings import Settings
from emq.stack import free_port
from tests.api.conftest import serve
from tests.conftest import RestartableRedis
from tests.worker.conftest import Sink, Stack

ADMIN = {"Authorization": "Bearer test-admin-token"}
RESUME_WITHIN_S = 2.0  # the target: delivery resumes this soon after Redis answers again


@pytest.fixture
def redis_url(own_redis: RestartableRedis) -> str:
    return own_redis.url


@pytest.fixture
async def api(settings: Settings, stack: Stack) -> AsyncIterator[TestClient]:
    """The HTTP API with its own Redis pool (the one that went stale in issue 11)."""
    queues = await open_queues(settings)
    client = await serve(settings, queues, stack.config)
    yield client
    await client.close()
    await queues.aclose()


async def _status(url: str) -> int:
    try:
        async with aiohttp.ClientSession() as s, s.get(url, timeout=aiohttp.ClientTimeout(2)) as r:
            return r.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


async def _until_status(url: str, status: int, timeout_s: float) -> float | None:
    """Poll ``url`` until it answers ``status``; seconds it took, or None."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if await _status(url) == status:
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    return None


async def _enqueue(api: TestClient, topic: str, jobs: list[dict[str, Any]]) -> tuple[int, Any]:
    r = await api.post(f"/v1/tenants/acme/topics/{topic}/jobs", json={"jobs": jobs}, headers=ADMIN)
    return r.status, await r.json()


def _jobs(sink: Sink, topic: str, n: int, tag: str) -> list[dict[str, Any]]:
    return [{"url": sink.url(topic), "body": {"tag": tag, "n": i}} for i in range(n)]


async def _stalled(sink: Sink, topic: str, quiet_s: float, timeout_s: float) -> bool:
    """True once ``topic`` got no delivery for ``quiet_s`` (its buffers ran dry)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        last = max((d.at for d in sink.of(topic)), default=0.0)
        if time.time() - last >= quiet_s:
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.serial
@pytest.mark.parametrize("crash", [True, False], ids=["kill-9", "clean-restart"])
async def test_worker_and_api_ride_out_a_redis_restart(
    crash: bool,
    own_redis: RestartableRedis,
    stack: Stack,
    api: TestClient,
    sink: Sink,
    worker_process: Any,
) -> None:
    await stack.topic("before", 50)
    port = free_port()
    worker = worker_process(EMQ_WORKER_METRICS_PORT=str(port))
    health = f"http://127.0.0.1:{port}/healthz"
    assert await _until_status(health, 200, 20) is not None, worker.log()
    # 16 requests at once: the API's pool holds 16 connections when Redis goes away.
    answers = await asyncio.gather(
        *(_enqueue(api, "before", _jobs(sink, "before", 20, f"b{i}")) for i in range(16))
    )
    assert {status for status, _ in answers} == {202}
    accepted = {job_id for _, body in answers for job_id in body["ids"]}
    assert await sink.wait_for(lambda: len(sink.of("before")) >= 20, 10), worker.log()

    own_redis.kill() if crash else own_redis.stop()
    assert await _until_status(health, 503, 10) is not None, worker.log()
    assert (await api.get("/healthz")).status == 503
    assert await _stalled(sink, "before", 0.5, 10), "the worker kept delivering without Redis"
    await stack.topic("during", 100)  # claimed while Redis is down: retried, not fatal
    own_redis.start()
    back = time.time()

    answers = await asyncio.gather(
        *(_enqueue(api, "before", _jobs(sink, "before", 5, f"a{i}")) for i in range(16))
    )
    assert [status for status, _ in answers] == [202] * 16, answers
    accepted |= {job_id for _, body in answers for job_id in body["ids"]}
    await stack.topic("after", 100)  # a new topic: its groups are claimed after the restart
    for topic in ("during", "after"):
        status, body = await _enqueue(api, topic, _jobs(sink, topic, 50, topic))
        assert status == 202
        accepted |= set(body["ids"])

    def delivered() -> set[str]:
        return {d.job_id for d in sink.deliveries}

    # Once delivery has resumed (how soon is judged below), the rest of the backlog drains at a
    # group's cap, not at 50 QPS (still one group): ~5 s less of waiting.
    resumed = await sink.wait_for(lambda: any(d.at >= back for d in sink.of("before")), 30)
    assert resumed, worker.log()
    await stack.update("before", qps=DEFAULT_MAX_GROUP_QPS)

    assert await sink.wait_for(lambda: accepted <= delivered(), 30), (
        len(accepted - delivered()),
        worker.log(),
    )
    resumed_s = min(d.at for d in sink.of("before") if d.at >= back) - back
    print(f"delivery resumed {resumed_s:.2f} s after redis answered again")
    assert resumed_s <= RESUME_WITHIN_S + 1.0, worker.log()  # + slack on a shared 2-core box
    assert await _until_status(health, 200, 5) is not None, worker.log()
    assert (await api.get("/healthz")).status == 200
    assert worker.proc.poll() is None, worker.log()
    assert "paused: redis unavailable" in worker.log()

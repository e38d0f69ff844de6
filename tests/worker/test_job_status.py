"""Job status and metrics on the real parts: the API (aiohttp on loopback) over real Redis and
ZooKeeper, a real ``emq worker`` process and a real HTTP sink.

Jobs are followed through their states (queued with a position, delayed, paused, no owner,
retry_wait with the last error, Retry-After, delivered with its latency, dead with its reason),
and the worker's and the API's ``/metrics`` are scraped with prometheus_client's parser before
and after real deliveries.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from emq.api import ApiSettings, make_app
from emq.api.auth import token_hash
from emq.api.enqueue import Enqueuer
from emq.compose import open_jobs
from emq.core.jobs import placed_job_id
from emq.core.model import Priority, Tenant, Topic, TopicRef
from emq.stack import free_port
from tests.worker.conftest import SECRET, Sink, Stack, fast_retry

Http = TestClient[web.Request, web.Application]
ADMIN = {"Authorization": "Bearer test-admin-token"}
OTHER = {"Authorization": "Bearer other.tenant-token"}


def jobs(sink: Sink, topic: str, n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"url": sink.url(topic), "body": {"n": i}} | extra for i in range(n)]


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[Http]:
    store = open_jobs(stack.settings)
    app = make_app(stack.settings, ApiSettings(), stack.config, stack.queues, jobs=store)
    client = TestClient(TestServer(app))
    await client.start_server()
    other = Tenant("other", "Other", token_hash("other.tenant-token"), time.time())
    await stack.config.create_tenant(other)
    yield client
    await client.close()
    await store.aclose()


def status_of(api: Http, topic: str) -> Callable[..., Awaitable[dict[str, Any]]]:
    async def get(job_id: str, expect: int = 200, headers: dict[str, str] = ADMIN) -> Any:
        r = await api.get(f"/v1/tenants/acme/topics/{topic}/jobs/{job_id}", headers=headers)
        assert r.status == expect, await r.text()
        return await r.json()

    return get


async def until(
    get: Callable[[str], Awaitable[dict[str, Any]]],
    job: str | Callable[[], str],
    done: Callable[[dict[str, Any]], bool],
    timeout_s: float = 15,
) -> dict[str, Any]:
    """Poll the status of ``job`` until ``done`` holds (the worker moves on its own clock);
    ``job`` may name it anew at each poll (the job at a place that moves)."""
    job_id = job if callable(job) else lambda: job
    deadline = time.monotonic() + timeout_s
    body = await get(job_id())
    while not done(body) and time.monotonic() < deadline:
        await _tick()
        body = await get(job_id())
    assert done(body), json.dumps(body)  # (whole: pytest cuts a dict's repr short)
    return body


async def _tick() -> None:
    await asyncio.sleep(0.1)  # between polls of a condition, not a synchronisation


async def test_waiting_jobs_without_a_worker(stack: Stack, sink: Sink, api: Http) -> None:
    await stack.topic("w", 10)  # one group at 10/s
    get = status_of(api, "w")
    await stack.enqueue("w", jobs(sink, "w", 2, priority="high"))
    mediums = await stack.enqueue("w", jobs(sink, "w", 3))
    (delayed,) = await stack.enqueue("w", jobs(sink, "w", 1, delay_s=60))

    body = await get(mediums[2])
    assert body["id"] == mediums[2] and body["topic"] == "w" and body["priority"] == "medium"
    assert body["state"] == "queued" and body["reason"] is None
    assert body["position"] == 4 and body["position_exact"] is True  # 2 highs, 2 mediums
    assert body["eta_s"] == 0.4

    body = await get(delayed)
    assert body["state"] == "delayed" and body["reason"] is None
    assert 55 < _epoch(body["until"]) - time.time() <= 60

    out = await _emq(api, "job", "show", delayed, "--tenant", "acme", "--topic", "w", "--json")
    assert json.loads(out) == body
    out = await _emq(api, "job", "show", mediums[2], "--tenant", "acme", "--topic", "w")
    assert out.splitlines()[0] == f"{mediums[2]}  queued" and "position: 4" in out

    await stack.update("w", paused=True)
    body = await get(mediums[0])
    assert body["state"] == "queued" and body["reason"]["code"] == "paused"
    assert body["position"] == 2
    await stack.update("w", paused=False)

    # Accepted 30 s ago (by its id) and nobody reports owning its group: no owner.
    late = Enqueuer(stack.config, stack.queues, clock=lambda: time.time() - 30)
    ref = TopicRef(stack.settings.namespace, "acme", "w")
    (old,) = (await late.enqueue(ref, jobs(sink, "w", 1), batch=True)).ids
    body = await get(old)
    assert body["state"] == "queued" and body["reason"]["code"] == "no_owner"


async def test_unknown_ids_and_other_tenants_learn_nothing(
    stack: Stack, sink: Sink, api: Http
) -> None:
    await stack.topic("w", 10)
    get = status_of(api, "w")
    (job,) = await stack.enqueue("w", jobs(sink, "w", 1))
    unknown = placed_job_id(int(time.time() * 1000), 0, Priority.MEDIUM)
    for job_id in (unknown, "msg_nope", placed_job_id(1, 7, Priority.HIGH), "x" * 300):
        body = await get(job_id, 404)
        assert body["error"]["code"] == "not_found"
    denied = await get(job, 404, OTHER)  # another tenant's topics do not exist for it
    assert set(denied) == {"error"} and "queued" not in str(denied)
    theirs = TopicRef(stack.settings.namespace, "other", "w")
    await stack.config.create_topic(Topic(theirs, 10, 1, secret=SECRET))
    r = await api.get(f"/v1/tenants/other/topics/w/jobs/{job}", headers=OTHER)
    assert r.status == 404  # its own topic of the same name does not hold acme's job
    (own,) = (await stack.enqueuer.enqueue(theirs, jobs(sink, "w", 1), batch=True)).ids
    r = await api.get(f"/v1/tenants/other/topics/w/jobs/{own}", headers=OTHER)
    assert r.status == 200 and (await r.json())["state"] == "queued"


async def test_jobs_followed_through_a_real_worker_and_its_metrics(
    stack: Stack, sink: Sink, api: Http, worker_process: Any
) -> None:
    await stack.topic("ok", 20)
    await stack.topic("fail", 20, retry=fast_retry(attempts=3, base_s=60))
    await stack.topic("ra", 20, retry=fast_retry(attempts=3, base_s=1))
    await stack.topic("dead", 20, retry=fast_retry(attempts=1))
    await stack.topic("slow", 1)
    sink.behaviour["fail"].status = 500
    sink.behaviour["ra"].status = 429
    sink.behaviour["ra"].retry_after = "120"
    sink.behaviour["dead"].status = 500
    port = free_port()  # (below the ephemeral range: no client's connect takes it first)
    worker = worker_process(EMQ_WORKER_METRICS_PORT=str(port))
    scrape = _scraper(f"http://127.0.0.1:{port}/metrics")
    before = await _until_up(scrape)

    ok = await stack.enqueue("ok", jobs(sink, "ok", 5))
    (fail,) = await stack.enqueue("fail", jobs(sink, "fail", 1))
    (ra,) = await stack.enqueue("ra", jobs(sink, "ra", 1))
    (dead,) = await stack.enqueue("dead", jobs(sink, "dead", 1))
    slow = await stack.enqueue("slow", jobs(sink, "slow", 60))

    body = await until(status_of(api, "ok"), ok[4], lambda b: b["state"] == "delivered")
    assert body["status"] == 200 and body["attempts"] == 1 and body["reason"] is None
    assert 0 <= body["latency_ms"] < 15_000 and _epoch(body["delivered_at"]) <= time.time()

    body = await until(status_of(api, "fail"), fail, lambda b: b["state"] == "retry_wait")
    assert body["attempt"] == 1 and body["last_status"] == 500
    assert body["last_error"] == "HTTP 500" and body["reason"]["code"] == "backoff"
    assert _epoch(body["next_attempt_at"]) > time.time() + 50

    body = await until(status_of(api, "ra"), ra, lambda b: b["state"] == "retry_wait")
    assert body["reason"]["code"] == "retry_after" and body["last_status"] == 429
    assert 100 < _epoch(body["reason"]["until"]) - time.time() <= 120

    body = await until(status_of(api, "dead"), dead, lambda b: b["state"] == "dead")
    assert body["error"] == "HTTP 500" and body["status"] == 500 and body["attempts"] == 1
    assert body["reason"]["code"] == "dead"

    get = status_of(api, "slow")
    body = await until(get, slow[-1], lambda b: (b.get("reason") or {}).get("code") == "quota")
    assert body["state"] == "queued" and body["reason"]["until"]
    assert 1 <= body["position"] <= 59
    # A job a few behind the one its group sends next is in the owner's buffer (it holds 8 of
    # this 1 QPS group). Which job that is moves on a second at a time: asked of a fixed one
    # (slow[3]), this check lost the race whenever the one before it took three seconds.
    body = await until(
        get, lambda: slow[len(sink.of("slow")) + 3], lambda b: b["state"] == "buffered"
    )
    assert body["worker"] == "w1"

    after = await _until(
        scrape,
        lambda m: (
            _value(m, "emq_delivery_latency_seconds_count", topic="ok") >= 5
            and _value(m, "emq_jobs_delivered_total", topic="ok") >= 5
            and _value(m, "emq_jobs_failed_total", topic="dead") >= 1
            and _value(m, "emq_topic_throttled_jobs", topic="slow") > 0
        ),
    )
    assert _value(before, "emq_jobs_delivered_total", topic="ok") == 0
    assert _value(after, "emq_push_duration_seconds_count", topic="ok") >= 5
    assert _value(after, "emq_push_duration_seconds_sum", topic="ok") > 0
    assert _value(after, "emq_delivery_latency_seconds_sum", topic="ok") > 0
    assert _value(after, "emq_push_attempts_failed_total", topic="fail") >= 1
    assert _value(after, "emq_push_attempts_failed_total", topic="dead") >= 1
    assert _value(after, "emq_jobs_failed_total", topic="fail") == 0  # retried, not failed
    assert _value(after, "emq_worker_buffer_bytes") > 0
    rounds = _value(after, "emq_worker_fetch_round_trips_total")
    assert rounds > _value(before, "emq_worker_fetch_round_trips_total") >= 0
    assert _value(after, "emq_worker_groups") == 5
    assert _value(after, "emq_worker_send_limit") > 0
    assert "emq_worker_event_loop_lag_seconds" in after
    moved = after.get("emq_quota_grants_moved_total", [])  # (counts: tests/worker/test_send_gate)
    for reason in ("late_send", "late_write"):
        assert [v for lab, v in moved if lab == {**lab, "topic": "ok", "reason": reason}], moved

    r = await api.get("/metrics")
    families = _families(await r.text())
    assert _value(families, "emq_topic_backlog_jobs", topic="slow", priority="medium") >= 1
    assert _value(families, "emq_topic_quota_qps", topic="slow") == 1
    assert _value(families, "emq_topic_oldest_job_age_seconds", topic="slow") > 0
    assert _value(families, "emq_topic_paused", topic="slow") == 0
    assert worker.proc is not None and worker.proc.poll() is None


async def _emq(api: Http, *args: str) -> str:
    """Run the ``emq`` CLI against the test's API (the loop keeps serving it meanwhile)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")} | {
        "EMQ_API_URL": str(api.make_url("")).rstrip("/"),
        "EMQ_ADMIN_TOKEN": "test-admin-token",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "emq", *args, env=env, stdout=PIPE, stderr=PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


Samples = dict[str, list[tuple[dict[str, str], float]]]


def _families(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def _value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples matching ``labels`` (0 if there are none)."""
    rows = samples.get(name, [])
    return sum(v for lab, v in rows if all(lab.get(k) == x for k, x in labels.items()))


def _scraper(url: str) -> Callable[[], Awaitable[Samples | None]]:
    async def scrape() -> Samples | None:
        try:
            async with aiohttp.ClientSession() as http, http.get(url) as r:
                return _families(await r.text()) if r.status == 200 else None
        except aiohttp.ClientError:
            return None  # not serving yet

    return scrape


async def _until_up(scrape: Callable[[], Awaitable[Samples | None]]) -> Samples:
    return await _until(scrape, lambda m: True)


async def _until(
    scrape: Callable[[], Awaitable[Samples | None]],
    done: Callable[[Samples], bool],
    timeout_s: float = 20,
) -> Samples:
    deadline = time.monotonic() + timeout_s
    while True:
        found = await scrape()
        if found is not None and done(found):
            return found
        assert time.monotonic() < deadline, found
        await _tick()

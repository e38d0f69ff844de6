"""The attempt log, the job search, callbacks and redeliveries on the real parts: the API
(aiohttp on loopback) over real Redis and ZooKeeper, a real ``emq worker`` process and the real
HTTP sink (docs/concepts/attempts.md).

One topic's jobs fail once and are then delivered with a body, another's always fail and die;
their attempts, the search by state and key, the callbacks (one per final outcome, signed) and a
redelivery of what was delivered are read back through the API. A second test kills the worker
(SIGKILL) right after a final outcome, before the job's completion is checkpointed: its
successor pushes the job again and the callback is still sent once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from standardwebhooks import Webhook

from emq.api import ApiSettings, make_app
from emq.compose import open_jobs, open_replays
from emq.rigs.sink import Behaviour
from tests.worker.conftest import SECRET, Sink, Stack, fast_retry

Http = TestClient[web.Request, web.Application]
ADMIN = {"Authorization": "Bearer test-admin-token"}


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[Http]:
    store, replays = open_jobs(stack.settings), open_replays(stack.settings)
    app = make_app(
        stack.settings, ApiSettings(), stack.config, stack.queues, jobs=store, replays=replays
    )
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client
    await client.close()
    await store.aclose()
    await replays.aclose()


async def eventually(check: Callable[[], Awaitable[Any]], timeout_s: float = 20) -> Any:
    """``check()`` once it returns something true (the worker moves on its own clock)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = await check()
        if got or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.1)


def get(api: Http, path: str, expect: int = 200) -> Callable[[], Awaitable[Any]]:
    """A GET of ``path``, answered ``expect``; for :func:`eventually`: None while 404."""

    async def call() -> Any:
        r = await api.get("/v1/tenants/acme/topics/" + path, headers=ADMIN)
        if r.status == 404 and expect == 200:
            return None  # (not recorded yet: the records are written with the checkpoint)
        assert r.status == expect, await r.text()
        return await r.json()

    return call


def verified(sink: Sink, topic: str) -> list[dict[str, Any]]:
    """The callbacks ``topic`` of the sink received, each signature verified."""
    out = []
    for d in sink.of(topic):
        Webhook(SECRET).verify(d.body, d.headers)
        out.append(json.loads(d.body))
    return out


async def test_attempts_search_callbacks_and_a_redelivery(
    stack: Stack, sink: Sink, api: Http, worker_process: Any
) -> None:
    sink.behaviour["ok"] = Behaviour(
        fail_first=1, headers={"Content-Type": "application/json"}, body=b'{"received": true}'
    )
    sink.behaviour["down"] = Behaviour(status=503, retry_after="0", body=b"maintenance")
    await stack.topic(
        "att",
        10,
        retry=fast_retry(3, 0.1),
        response_excerpt_bytes=8,
        callback_url=sink.url("cb"),
        failure_callback_url=sink.url("cbfail"),
        keep_delivered_s=600,
    )
    t0 = time.time()
    ok, down = await stack.enqueue(
        "att",
        [
            {"url": sink.url("ok"), "key": "order-1", "idempotency_key": "i-1"},
            {"url": sink.url("down"), "key": "order-1"},
        ],
    )
    worker_process()
    found = await eventually(lambda: _two_callbacks(sink))
    assert found, "callbacks not sent"

    attempts = (await eventually(get(api, f"att/jobs/{ok}/attempts")))["attempts"]
    assert [a["status"] for a in attempts] == [500, 200]
    assert attempts[1]["headers"]["content-type"] == "application/json"
    assert attempts[1]["response_excerpt"] == '{"receiv'  # 8 bytes: the topic's excerpt
    assert all(a["outcome"] == "http" and a["duration_ms"] >= 0 for a in attempts)
    dead = (await get(api, f"att/jobs/{down}/attempts")())["attempts"]
    assert [a["status"] for a in dead] == [503, 503, 503]
    assert dead[0]["headers"]["retry-after"] == "0"

    by_state = await get(api, "att/jobs?state=dead")()
    assert [(j["id"], j["attempts"], j["last_error"]) for j in by_state["jobs"]] == [
        (down, 3, "HTTP 503")
    ]
    by_key = await get(api, f"att/jobs?key=order-1&since={t0 - 1}")()
    assert {j["id"]: j["state"] for j in by_key["jobs"]} == {ok: "delivered", down: "dead"}
    by_idem = await get(api, "att/jobs?idempotency_key=i-1")()
    assert [j["id"] for j in by_idem["jobs"]] == [ok]
    page = await get(api, "att/jobs?limit=1")()
    assert len(page["jobs"]) == 1 and page["next_cursor"]
    rest = await get(api, f"att/jobs?limit=1&cursor={page['next_cursor']}")()
    assert [j["id"] for j in rest["jobs"]] != [j["id"] for j in page["jobs"]]

    # The callbacks: one per final outcome, signed like any job.
    told = verified(sink, "cb")
    assert [(c["job_id"], c["outcome"], c["status"], c["attempts"]) for c in told] == [
        (ok, "delivered", 200, 2)
    ]
    assert told[0]["response_excerpt"] == '{"receiv'
    failed = verified(sink, "cbfail")
    assert [(c["job_id"], c["outcome"], c["attempts"]) for c in failed] == [(down, "dead", 3)]

    # A redelivery of what was delivered since t0: the same webhook-id, a new attempt.
    r = await api.post(
        "/v1/tenants/acme/topics/att/redeliveries", json={"since": t0, "rate": 50}, headers=ADMIN
    )
    assert r.status == 201, await r.text()
    redelivery = await r.json()
    assert redelivery["total"] == 1
    again = await eventually(lambda: _delivered_times(sink, "ok", ok, 2))
    assert again, "not redelivered"
    attempts = await eventually(lambda: _attempts_at_least(api, ok, 3))
    assert [a["attempt"] for a in attempts] == [1, 2, 3]
    shown = await eventually(get(api, f"att/redeliveries/{redelivery['id']}"))
    assert shown["state"] in ("running", "done")
    await asyncio.sleep(0.5)
    assert len(sink.of("cb")) == 1  # a redelivery tells no second callback


async def _two_callbacks(sink: Sink) -> bool:
    return bool(sink.of("cb")) and bool(sink.of("cbfail"))


async def _delivered_times(sink: Sink, topic: str, job_id: str, n: int) -> bool:
    return sum(d.job_id == job_id for d in sink.of(topic)) >= n


async def _attempts_at_least(api: Http, job_id: str, n: int) -> list[dict[str, Any]] | None:
    body = await get(api, f"att/jobs/{job_id}/attempts")()
    got: list[dict[str, Any]] = body["attempts"] if body else []
    return got if len(got) >= n else None


async def test_bad_searches_and_redeliveries_are_refused(stack: Stack, api: Http) -> None:
    await stack.topic("plain", 10)
    await stack.topic("other", 10)
    page = await get(api, "other/jobs")()
    assert page == {"jobs": [], "next_cursor": None}
    from emq.core.attempts import encode_cursor

    cursor = encode_cursor("online/acme/other", 1, "msg_x")
    for query, field in [
        ("state=sleeping", "state"),
        (f"cursor={cursor}", "cursor"),
        ("cursor=garbage!", "cursor"),
        (f"since={time.time() - 10 * 86400}", "since"),
        ("since=20&until=10", "until"),
        ("limit=0", "limit"),
    ]:
        body = await get(api, "plain/jobs?" + query, 422)()
        assert body["error"]["field"] == field, (query, body)
    r = await api.post(
        "/v1/tenants/acme/topics/plain/redeliveries", json={"since": time.time()}, headers=ADMIN
    )
    assert r.status == 409, await r.text()  # the topic keeps no delivered jobs
    r = await api.get("/v1/tenants/acme/topics/plain/jobs/msg_nope/attempts", headers=ADMIN)
    assert r.status == 404, await r.text()


async def test_a_worker_killed_after_final_outcomes_still_calls_back_once_each(
    stack: Stack, sink: Sink, worker_process: Any
) -> None:
    """SIGKILL after deliveries whose completion was not yet checkpointed (a long checkpoint
    interval): some callbacks were put, others perhaps not; the successor pushes every job
    again from the checkpoint, and each job still has exactly one callback job (one
    ``webhook-id``; that job, like any, may itself be delivered more than once)."""
    await stack.topic("kc", 50, callback_url=sink.url("kcb"))
    ids = await stack.enqueue("kc", [{"url": sink.url("kc"), "body": {"n": i}} for i in range(20)])
    first = worker_process("w-first", EMQ_WORKER_CHECKPOINT_INTERVAL_S="60")
    assert await sink.wait_for(lambda: len(sink.of("kcb")) >= 5, 20), first.log()
    first.kill()
    worker_process("w-second")
    assert await sink.wait_for(lambda: {d.job_id for d in sink.of("kc")} >= set(ids), 30)

    def callbacks() -> dict[str, set[str]]:
        """Per job told of, the webhook-ids of its callbacks."""
        out: dict[str, set[str]] = {}
        for d in sink.of("kcb"):
            out.setdefault(json.loads(d.body)["job_id"], set()).add(d.job_id)
        return out

    assert await sink.wait_for(lambda: set(callbacks()) == set(ids), 20), callbacks()
    await asyncio.sleep(1.0)  # (a second callback of any job would be here by now)
    delivered = [d.job_id for d in sink.of("kc")]
    assert len(delivered) > len(ids)  # pushed again after the kill: outcomes were not final
    assert {job: len(hooks) for job, hooks in callbacks().items()} == dict.fromkeys(ids, 1)
    assert {c["outcome"] for c in verified(sink, "kcb")} == {"delivered"}

"""The worker's side of the attempt log and callbacks, on the in-memory backends: what a flush
adds (each outcome's attempt, its index entry, the deliveries a topic keeps), which URL a final
outcome is told to, and the callback jobs a worker puts (one per final outcome, signed and
pushed like any job, none for a callback itself)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import orjson

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from emq.api.enqueue import Enqueuer
from emq.core.attempts import Attempt
from emq.core.interfaces import Pusher, PushRequest, PushResult
from emq.core.jobs import JobRecord
from emq.core.model import Namespace, Priority, Tenant, Topic, TopicRef
from tests.worker.conftest import fast_retry, worker_in_loop
from worker import attempt_log
from worker.callbacks import callback_url

REF = TopicRef(Namespace.ONLINE, "acme", "t")


def _item(job: dict[str, Any], job_id: str = "msg_a", attempts: int = 0) -> Any:
    payload = orjson.dumps({"id": job_id, "t": 1, "job": job, "a": attempts})
    queue = SimpleNamespace(group="g0", priority=Priority.HIGH)
    return SimpleNamespace(payload=payload, queue=queue, job_dict=lambda: job)


def _group(**topic: Any) -> Any:
    t = Topic(REF, 10, **topic)
    return SimpleNamespace(topic=SimpleNamespace(topic=t), ref="g0")


def test_a_flush_adds_attempts_index_entries_and_kept_deliveries() -> None:
    group = _group(keep_delivered_s=60)
    job = {"url": "https://x.example/", "key": "order-1", "idempotency_key": "i-1"}
    meta = (None, b"text/plain", b"2", b"ok")
    delivered = (
        "msg_a",
        1_000_500,
        2,
        200,
        40,
        PushResult(200, 0.25, meta=meta),
        group,
        _item(job),
    )
    retry = JobRecord("msg_b", "retry_wait", 1_000_000, 1, None, "timed out", None, 1_001_000)
    writes = attempt_log.writes(
        [delivered, retry], [(retry, PushResult(0, 5.0, error="timed out"), group, _item({}))]
    )
    (a_id, a_n, a_raw), (b_id, b_n, b_raw) = writes.attempts
    assert (a_id, a_n, b_id, b_n) == ("msg_a", 2, "msg_b", 1)
    assert Attempt.decode(a_raw) == Attempt(
        2, 1_000_250, 250, 200, "http", None, {"content-type": "text/plain", "content-length": "2"},
        "ok",
    )  # fmt: skip
    assert Attempt.decode(b_raw) == Attempt(1, 995_000, 5000, 0, "timeout", "timed out")
    assert [(e[1], e[2], e[4], e[5]) for e in writes.index] == [
        ("msg_a", "delivered", "order-1", "i-1"),
        ("msg_b", "retry_wait", None, None),
    ]
    ((_queue, keep_ms, payload),) = writes.kept
    kept = orjson.loads(payload)
    assert keep_ms == 60_000 and kept["a"] == 2  # the next send is its attempt 3
    assert kept["job"]["callback_url"] == ""  # a redelivery tells no callback


def test_a_final_outcome_is_told_to_the_job_s_url_then_the_topic_s() -> None:
    topic = Topic(REF, 10, callback_url="https://t.example/ok", failure_callback_url="")
    assert callback_url(topic, {}, "delivered") == "https://t.example/ok"
    assert callback_url(topic, {}, "dead") == "https://t.example/ok"
    own = {"callback_url": "https://j.example/ok", "failure_callback_url": "https://j.example/f"}
    assert callback_url(topic, own, "delivered") == "https://j.example/ok"
    assert callback_url(topic, own, "dead") == "https://j.example/f"
    assert callback_url(topic, {"callback_url": ""}, "delivered") is None
    assert callback_url(topic, {"callback_of": "msg_a"}, "dead") is None
    assert callback_url(Topic(REF, 10), {}, "delivered") is None


class _Scripted(Pusher):
    """200 to every request, 500 to those of ``/fail``; the body ``answer``, kept as asked."""

    def __init__(self) -> None:
        self.requests: list[PushRequest] = []

    async def push(self, request: PushRequest) -> PushResult:
        self.requests.append(request)
        status = 500 if request.url.endswith("/fail") else 200
        kept = b"answer"[: request.excerpt_bytes] if request.excerpt_bytes else None
        return PushResult(status, 0.001, meta=(None, None, None, kept))

    async def aclose(self) -> None:
        return None


async def test_a_worker_puts_one_signed_callback_per_final_outcome() -> None:
    queues, config = MemoryQueueBackend(), MemoryConfigStore()
    await config.create_tenant(Tenant("acme", "", "0" * 64, 0.0))
    topic = Topic(
        REF, 100, 1, retry=fast_retry(2, 0.05), secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        failure_callback_url="https://cb.example/dead", response_excerpt_bytes=4,
    )  # fmt: skip
    await config.create_topic(topic)
    jobs = [
        {"url": "https://far.example/ok", "callback_url": "https://cb.example/ok"},
        {"url": "https://far.example/fail"},
        {"url": "https://far.example/quiet"},
    ]
    ok, fail, _ = (await Enqueuer(config, queues).enqueue(REF, jobs, batch=True)).ids
    pusher = _Scripted()
    async with worker_in_loop(config, queues, pusher, senders=4, senders_min=4) as running:
        deadline = time.monotonic() + 10
        while len(_to(pusher, "cb.example")) < 2 and time.monotonic() < deadline:
            assert not running.done(), running
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
    told = [(r.url, orjson.loads(r.body or b"")) for r in _to(pusher, "cb.example")]
    assert sorted((url, b["job_id"], b["outcome"], b["attempts"]) for url, b in told) == sorted(
        [
            ("https://cb.example/ok", ok, "delivered", 1),
            ("https://cb.example/dead", fail, "dead", 2),
        ]
    )
    assert all("webhook-signature" in r.headers for r in _to(pusher, "cb.example"))
    assert {b.get("response_excerpt") for _, b in told} == {"answ"}  # the topic's 4 bytes


def _to(pusher: _Scripted, host: str) -> list[PushRequest]:
    return [r for r in pusher.requests if host in r.url]

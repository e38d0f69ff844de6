"""The Python client and its Producer against the real API (loopback server, real Redis and
ZooKeeper): every method, the error mapping, and batching under the hood."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from emq.client import ApiError, Client, JobsRejected, Producer, error_from_response
from emq.core import errors
from emq.stack import free_port
from tests.api.conftest import Api
from tests.emq.support import JOB, dead_letter_everything

ADMIN_TOKEN = "test-admin-token"


def _url(api: Api) -> str:
    return str(api.client.make_url("/"))


@pytest.fixture
async def admin(api: Api) -> AsyncIterator[Client]:
    async with Client(_url(api), ADMIN_TOKEN) as client:
        yield client


@pytest.fixture
async def acme(api: Api, admin: Client) -> AsyncIterator[Client]:
    """A client holding tenant acme's token; acme has topic ``orders`` (300 QPS, 2 groups)."""
    created = await admin.create_tenant("acme", "Acme Corp")
    await admin.create_topic("acme", "orders", 300)
    async with Client(_url(api), created["token"]) as client:
        yield client


async def _backlog(client: Client, topic: str = "orders", **kw: Any) -> int:
    shown = await client.get_topic("acme", topic, **kw)
    return sum(shown["backlog"].values()) + int(shown["delayed"])


async def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


# ------------------------------------------------------------------ every method


async def test_tenants_and_topics_round_trip(admin: Client) -> None:
    created = await admin.create_tenant("acme", "Acme Corp")
    assert created["tenant"] == "acme" and created["token"].startswith("acme.")
    assert [t["tenant"] for t in await admin.list_tenants()] == ["acme"]
    topic = await admin.create_topic(
        "acme",
        "orders",
        1000,
        retry={"max_attempts": 3},
        endpoint_concurrency=8,
        max_backlog=5000,
        priority_mode="weighted",
    )
    assert topic["groups"] == 7 and topic["secret"].startswith("whsec_")
    assert topic["retry"]["max_attempts"] == 3 and topic["priority_mode"] == "weighted"
    assert (topic["endpoint_concurrency"], topic["max_backlog"]) == (8, 5000)
    sandbox = await admin.create_topic("acme", "orders", 10, namespace="sandbox")
    assert sandbox["namespace"] == "sandbox" and sandbox["qps"] == 10
    assert [t["qps"] for t in await admin.list_topics("acme")] == [1000]
    assert [t["qps"] for t in await admin.list_topics("acme", namespace="sandbox")] == [10]
    shown = await admin.get_topic("acme", "orders")
    assert shown["backlog"] == {"high": 0, "medium": 0, "low": 0} and "secret" not in shown
    assert (await admin.set_quota("acme", "orders", 2000))["groups"] == 14
    assert (await admin.pause("acme", "orders"))["paused"] is True
    assert (await admin.resume("acme", "orders"))["paused"] is False
    changed = await admin.update_topic("acme", "orders", max_backlog=10, endpoint_concurrency=2)
    assert (changed["max_backlog"], changed["endpoint_concurrency"]) == (10, 2)
    assert (await admin.get_topic("acme", "orders", namespace="sandbox"))["qps"] == 10


async def test_client_namespace_is_the_default_of_topic_routes(api: Api, admin: Client) -> None:
    await admin.create_tenant("acme")
    async with Client(_url(api), ADMIN_TOKEN, namespace="sandbox") as sandbox:
        assert (await sandbox.create_topic("acme", "orders", 10))["namespace"] == "sandbox"
        assert (await sandbox.get_topic("acme", "orders"))["qps"] == 10
        await sandbox.enqueue("acme", "orders", JOB)
        assert await _backlog(sandbox) == 1
    with pytest.raises(errors.NotFound):
        await admin.get_topic("acme", "orders")


async def test_enqueue_one_job_and_a_list_in_batches(acme: Client) -> None:
    one = await acme.enqueue("acme", "orders", JOB | {"idempotency_key": "k1"})
    again = await acme.enqueue("acme", "orders", JOB | {"idempotency_key": "k1"})
    assert again == {"ids": one["ids"], "duplicates": 1}
    many = await acme.enqueue("acme", "orders", [JOB | {"body": str(i)} for i in range(2500)])
    assert len(set(many["ids"])) == 2500 and many["duplicates"] == 0
    assert await _backlog(acme) == 2501


async def test_dlq_list_pages_and_replay(api: Api, acme: Client) -> None:
    ids = (await acme.enqueue("acme", "orders", [JOB] * 4))["ids"]
    assert await dead_letter_everything(api.queues, "acme", "orders", groups=2) == 4
    page = await acme.dlq_list("acme", "orders", limit=3)
    assert len(page["dead"]) == 3 and page["next_cursor"]
    rest = await acme.dlq_list("acme", "orders", cursor=page["next_cursor"])
    assert len(rest["dead"]) == 1 and rest["next_cursor"] is None
    letters = page["dead"] + rest["dead"]
    assert sorted(d["job_id"] for d in letters) == sorted(ids)
    assert await acme.dlq_replay("acme", "orders", ids=[letters[0]["id"]]) == {"replayed": 1}
    assert await acme.dlq_replay("acme", "orders", limit=2) == {"replayed": 2}
    assert await acme.dlq_replay("acme", "orders") == {"replayed": 1}
    assert (await acme.dlq_list("acme", "orders"))["dead"] == []


async def test_health(admin: Client) -> None:
    assert await admin.health() == {"status": "ok", "redis": "ok", "zookeeper": "ok"}


async def test_shared_session_is_left_open(api: Api) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with Client(_url(api), ADMIN_TOKEN, session=session) as client:
            await client.list_tenants()
        assert not session.closed
        assert await Client(_url(api), ADMIN_TOKEN, session=session).list_tenants() == []


# ------------------------------------------------------------------ error mapping


async def _raises(cls: type[BaseException], call: Any) -> Any:
    with pytest.raises(cls) as info:
        await call
    assert type(info.value) is cls, f"{type(info.value).__name__} is not {cls.__name__}"
    return info.value


async def test_each_error_status_becomes_its_class(api: Api, admin: Client, acme: Client) -> None:
    url = _url(api)
    async with Client(url, "") as anonymous, Client(url, "acme.wrong") as wrong:
        assert "bearer" in (await _raises(errors.Unauthorized, anonymous.list_tenants())).message
        await _raises(errors.Unauthorized, wrong.get_topic("acme", "orders"))
    await _raises(errors.Forbidden, acme.create_tenant("evil"))
    await _raises(errors.NotFound, acme.get_topic("acme", "missing"))
    await _raises(errors.AlreadyExists, admin.create_tenant("acme"))
    big = JOB | {"body": "x" * (256 * 1024 + 1)}
    assert (await _raises(errors.PayloadTooLarge, acme.enqueue("acme", "orders", big))).field == (
        "body"
    )
    bad = await _raises(errors.InvalidInput, acme.enqueue("acme", "orders", [JOB, {"url": "x"}]))
    assert bad.field == "jobs[1].url" and "scheme" in bad.message
    assert (
        await _raises(errors.InvalidInput, admin.set_quota("acme", "orders", -1))
    ).field == "qps"
    path = "v1/tenants/acme/topics/orders/jobs"
    await _raises(errors.MalformedRequest, acme.request("POST", path, raw=b"{not json"))
    await admin.update_topic("acme", "orders", max_backlog=3)
    await acme.enqueue("acme", "orders", [JOB] * 3)
    acme.retry_for_s = 0  # answered at once, not retried for the default 60 s (tested apart)
    full = await _raises(errors.BacklogFull, acme.enqueue("acme", "orders", JOB))
    assert full.retry_after_s >= 1
    assert await _backlog(acme) == 3


async def test_unreachable_api_is_backend_unavailable() -> None:
    async with Client(f"http://127.0.0.1:{free_port()}", ADMIN_TOKEN) as client:
        with pytest.raises(errors.BackendUnavailable, match="cannot reach"):
            await client.health()


def test_error_table_covers_every_documented_status() -> None:
    body = {"error": {"code": "c", "message": "m", "field": "f"}}
    expected = {
        400: errors.MalformedRequest,
        401: errors.Unauthorized,
        403: errors.Forbidden,
        404: errors.NotFound,
        409: errors.AlreadyExists,
        413: errors.PayloadTooLarge,
        422: errors.InvalidInput,
        429: errors.BacklogFull,
        503: errors.BackendUnavailable,
    }
    for status, cls in expected.items():
        error = error_from_response(status, body, "7")
        assert type(error) is cls and str(error.args[0]) == "m"
        if isinstance(error, errors.InvalidInput):
            assert error.field == "f"
    assert error_from_response(429, body, "7").retry_after_s == 7  # type: ignore[attr-defined]
    health = error_from_response(503, {"status": "unavailable", "redis": "ok"}, None)
    assert isinstance(health, errors.BackendUnavailable) and "redis ok" in str(health)
    odd = error_from_response(502, "<html>Bad gateway</html>", None)
    assert isinstance(odd, ApiError) and odd.status == 502 and "Bad gateway" in odd.message


# ------------------------------------------------------------------ producer


async def test_producer_send_in_a_loop_queues_and_batches(api: Api, acme: Client) -> None:
    """The README's pattern: ``await send(job)`` returns once the job is queued, so a loop of
    10 000 sends costs a handful of requests; the end of ``async with`` waits for them all."""
    async with acme.producer("acme", "orders") as producer:
        for n in range(10_000):
            await producer.send(JOB | {"body": {"n": n}})
    assert producer.accepted == 10_000 and producer.failed == 0
    assert producer.requests <= 10_000 / 1000 + 10, "jobs were not batched"
    assert await _backlog(acme) == 10_000


class HeldClient(Client):
    """A client whose enqueue requests wait until released: its Producer's senders stay busy."""

    def __init__(self, url: str, token: str) -> None:
        super().__init__(url, token)
        self.release = asyncio.Event()
        self.posted = asyncio.Event()

    async def enqueue_encoded(self, *args: Any, **kw: Any) -> dict[str, Any]:
        self.posted.set()
        await self.release.wait()
        return await super().enqueue_encoded(*args, **kw)


async def test_producer_send_waits_while_the_local_queue_is_full(api: Api, acme: Client) -> None:
    """Back-pressure: with every sender busy and the queue of cut batches full, ``send`` waits
    instead of holding ever more jobs."""
    held = HeldClient(_url(api), ADMIN_TOKEN)  # the admin may enqueue too
    producer = held.producer("acme", "orders", max_batch=10, max_in_flight=1, linger_s=10)
    async with held, producer:
        for _ in range(20):  # one batch in flight (held), one waiting for the sender
            await producer.send(JOB)
        await held.posted.wait()
        blocked = asyncio.create_task(_send_many(producer, 10))
        for _ in range(100):  # every task that can run does (the held request cannot)
            await asyncio.sleep(0)
        assert not blocked.done(), "send did not wait for room"
        held.release.set()
        await blocked
    assert producer.accepted == 30
    assert await _backlog(acme) == 30


async def _send_many(producer: Producer, n: int) -> None:
    for _ in range(n):
        await producer.send(JOB)


async def test_producer_send_and_wait_returns_each_id(
    api: Api, admin: Client, acme: Client
) -> None:
    await admin.set_quota("acme", "orders", 1000)
    sent: list[str] = []

    async def sender(producer: Producer, worker: int) -> None:
        for i in range(25):
            sent.append(await producer.send_and_wait(JOB | {"body": f"{worker}-{i}"}))

    async with acme.producer("acme", "orders") as producer:
        await asyncio.gather(*(sender(producer, w) for w in range(400)))
    assert len(sent) == len(set(sent)) == 10_000
    assert producer.accepted == 10_000 and producer.failed == 0
    assert producer.requests <= 10_000 / 100, "jobs were not batched"
    assert await _backlog(acme) == 10_000


async def test_producer_honours_retry_after_on_429(admin: Client, acme: Client) -> None:
    await admin.update_topic("acme", "orders", max_backlog=5)
    await acme.enqueue("acme", "orders", [JOB] * 5)
    async with acme.producer("acme", "orders") as producer:
        started = time.monotonic()
        futures = [await producer.submit(JOB) for _ in range(10)]
        await _until(lambda: producer.throttled > 0)
        await admin.update_topic("acme", "orders", max_backlog=100)  # room, once it retries
        ids = await asyncio.gather(*futures)
    assert time.monotonic() - started >= 1.0, "retried before Retry-After"
    assert len(set(ids)) == 10 and producer.throttled >= 1
    assert await _backlog(acme) == 15


async def test_producer_reports_jobs_still_refused_after_its_budget(
    admin: Client, acme: Client
) -> None:
    await admin.update_topic("acme", "orders", max_backlog=5)
    await acme.enqueue("acme", "orders", [JOB] * 5)
    with pytest.raises(JobsRejected) as info:
        async with acme.producer("acme", "orders", retry_for_s=0.5) as producer:
            for n in range(3):
                await producer.send(JOB | {"body": {"n": n}})
    rejected = info.value.rejected
    assert [r.job["body"] for r in rejected] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert all(isinstance(r.error, errors.BacklogFull) for r in rejected)
    assert "3 jobs not accepted" in str(info.value)
    assert producer.failed == 3 and await _backlog(acme) == 5


async def test_producer_fails_only_the_rejected_job(acme: Client) -> None:
    async with acme.producer("acme", "orders") as producer:
        results = await asyncio.gather(
            producer.send_and_wait(JOB),
            producer.send_and_wait({"url": "ftp://example.com/x"}),
            producer.send_and_wait(JOB | {"body": "x" * (256 * 1024 + 1)}),
            producer.send_and_wait(JOB),
            return_exceptions=True,
        )
        with pytest.raises(TypeError):
            await producer.send({"url": "https://example.com/", "body": {1, 2}})
    good, bad_url, too_big, also_good = results
    assert isinstance(good, str) and isinstance(also_good, str)
    assert isinstance(bad_url, errors.InvalidInput) and bad_url.field == "url"
    assert isinstance(too_big, errors.PayloadTooLarge) and too_big.field == "body"
    assert (producer.accepted, producer.failed) == (2, 2)
    assert await _backlog(acme) == 2


async def test_flush_reports_each_rejected_send_once_and_keeps_the_rest(acme: Client) -> None:
    async with acme.producer("acme", "orders") as producer:
        await producer.send(JOB)
        await producer.send({"url": "ftp://example.com/x"})
        await producer.send(JOB | {"body": "x" * (256 * 1024 + 1)})
        await producer.send(JOB)
        with pytest.raises(JobsRejected) as info:
            await producer.flush()
        await producer.send(JOB)
        await producer.flush()  # reported once: nothing new to report
    (url, size) = info.value.rejected
    assert url.job == {"url": "ftp://example.com/x"} and isinstance(url.error, errors.InvalidInput)
    assert url.error.field == "url"
    assert isinstance(size.error, errors.PayloadTooLarge) and size.error.field == "body"
    assert (producer.accepted, producer.failed) == (3, 2)
    assert await _backlog(acme) == 3


async def test_producer_reports_a_whole_failed_batch(acme: Client) -> None:
    with pytest.raises(JobsRejected) as info:
        async with acme.producer("acme", "missing") as producer:
            for _ in range(5):
                await producer.send(JOB)
    assert len(info.value.rejected) == 5
    assert all(isinstance(r.error, errors.NotFound) for r in info.value.rejected)


async def test_an_error_in_the_block_is_not_masked_and_jobs_still_go(acme: Client) -> None:
    with pytest.raises(KeyError) as info:
        async with acme.producer("acme", "orders") as producer:
            await producer.send(JOB)
            await producer.send({"url": "ftp://example.com/x"})
            raise KeyError("the caller's own error")
    assert any("1 jobs not accepted" in note for note in info.value.__notes__)
    assert (producer.accepted, producer.failed) == (1, 1)
    assert await _backlog(acme) == 1


async def test_producer_close_delivers_what_is_pending(acme: Client) -> None:
    producer = acme.producer("acme", "orders", max_batch=7, linger_s=10)
    futures = [await producer.submit(JOB) for _ in range(20)]
    assert not futures[-1].done()  # 6 jobs wait for the (long) linger
    await producer.flush()
    assert all(f.done() for f in futures)
    more = [await producer.submit(JOB) for _ in range(3)]
    await producer.send(JOB)
    await producer.aclose()
    await producer.aclose()
    assert all(f.result() for f in more)
    with pytest.raises(RuntimeError, match="closed"):
        await producer.send(JOB)
    assert await _backlog(acme) == 24

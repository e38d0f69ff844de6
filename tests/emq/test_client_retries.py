"""Clients through a Redis outage (issue 11, item 2): the Producer and ``emq enqueue --file``
re-send what the API answered 503 until Redis is back, and report every job they could not
place; on this test's own Redis, killed and restarted, behind a real loopback API."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from emq.client import Backoff, Client
from emq.core import errors
from tests.api.conftest import Api
from tests.conftest import RestartableRedis
from tests.emq.support import JOB

ADMIN_TOKEN = "test-admin-token"
ROOT = Path(__file__).resolve().parents[2]
OUTAGE_S = 3.0


@pytest.fixture
def redis_url(own_redis: RestartableRedis) -> str:
    return own_redis.url


@pytest.fixture
async def token(api: Api) -> AsyncIterator[str]:
    """Tenant acme's token; acme has topic ``orders`` (1000 QPS)."""
    async with Client(str(api.client.make_url("/")), ADMIN_TOKEN) as admin:
        created = await admin.create_tenant("acme")
        await admin.create_topic("acme", "orders", 1000)
    yield created["token"]


async def _emq(api: Api, *args: str, token: str) -> tuple[int, str, str]:
    """``emq ARGS`` against the test's API: (exit status, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env |= {"EMQ_API_URL": str(api.client.make_url("/")), "EMQ_TOKEN": token}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "emq",
        *args,
        cwd=ROOT,
        env=env | {"EMQ_LOG_LEVEL": "WARNING"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _backlog(api: Api, token: str) -> int:
    async with Client(str(api.client.make_url("/")), token) as acme:
        shown = await acme.get_topic("acme", "orders")
    return sum(shown["backlog"].values())


def _file(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_producer_and_enqueue_file_deliver_every_job_across_an_outage(
    api: Api, own_redis: RestartableRedis, token: str, tmp_path: Path
) -> None:
    jobs = [json.dumps(JOB | {"body": f"file-{i}"}) for i in range(300)]
    path = _file(tmp_path, jobs)
    own_redis.kill()
    cli = asyncio.create_task(
        _emq(api, "enqueue", "acme", "orders", "--file", str(path), "--json", token=token)
    )
    acme = Client(str(api.client.make_url("/")), token)
    async with acme, acme.producer("acme", "orders", max_batch=50) as producer:
        futures = [await producer.submit(JOB | {"body": f"p-{i}"}) for i in range(300)]
        for _ in range(200):  # the API answered 503 at least once: Redis is really gone
            if producer.unavailable:
                break
            await asyncio.sleep(0.02)
        assert producer.unavailable > 0
        await asyncio.sleep(OUTAGE_S)
        own_redis.start()
        ids = await asyncio.gather(*futures)
    assert len(set(ids)) == 300 and producer.failed == 0
    code, out, err = await cli
    assert code == 0, err
    body = json.loads(out)
    assert len(set(body["ids"])) == 300 and (body["failed"], body["rejected"]) == (0, [])
    assert await _backlog(api, token) == 600


async def test_enqueue_file_lists_every_line_not_accepted_when_redis_stays_down(
    api: Api, own_redis: RestartableRedis, token: str, tmp_path: Path
) -> None:
    path = _file(tmp_path, [json.dumps(JOB | {"body": str(i)}) for i in range(3)])
    own_redis.kill()
    code, out, err = await _emq(
        api, "enqueue", "acme", "orders", "--file", str(path), "--retry-for", "1", token=token
    )
    assert code == 1 and out.startswith("accepted 0 of 3 jobs")
    lines = err.splitlines()
    assert lines[0] == "emq: error: 3 of 3 jobs not accepted:", err
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["line 1", "line 2", "line 3"]
    assert all("unavailable: " in line for line in lines[1:]), err
    code, out, _ = await _emq(
        api,
        "enqueue",
        "acme",
        "orders",
        "--file",
        str(path),
        "--retry-for",
        "0",
        "--json",
        token=token,
    )
    assert code == 1
    rejected = json.loads(out)["rejected"]
    assert [(r["line"], r["error"]["code"]) for r in rejected] == [
        (1, "unavailable"),
        (2, "unavailable"),
        (3, "unavailable"),
    ]


async def test_enqueue_file_lists_every_bad_line_and_sends_nothing(
    api: Api, token: str, tmp_path: Path
) -> None:
    good = json.dumps(JOB)
    path = _file(tmp_path, [good, "{not json", good, '{"url": "ftp://x/"}', good])
    code, out, err = await _emq(api, "enqueue", "acme", "orders", "--file", str(path), token=token)
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == "emq: error: invalid: 2 lines are not valid jobs; nothing was sent:", err
    assert lines[1].strip().startswith("line 2: is not valid JSON")
    assert lines[2].strip().startswith("line 4.url: scheme must be http or https")
    assert await _backlog(api, token) == 0


async def test_backoff_grows_with_jitter_and_stops_at_its_deadline() -> None:
    backoff = Backoff(1.0, rand=lambda: 1.0)
    unavailable = errors.BackendUnavailable("503")
    delays = [backoff.delay_for(unavailable) for _ in range(4)]
    assert delays == [0.1, 0.2, 0.4, 0.8]
    assert backoff.delay_for(unavailable) is None  # 1.6 s more would pass the deadline
    assert backoff.delay_for(errors.NotFound("gone")) is None  # not retryable at all
    assert Backoff(10.0, rand=lambda: 0.5).delay_for(errors.BacklogFull("full", 2.5)) == 2.5


class AnswerLosingProxy:
    """Forwards requests to the API; the first one's answer never comes back (the jobs are
    stored, the client times out): the case where a retry could store a batch twice."""

    def __init__(self, api_url: str) -> None:
        self.api_url = api_url.rstrip("/")
        self.release = asyncio.Event()
        self.forwarded = 0

    async def handle(self, request: web.Request) -> web.Response:
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method,
                self.api_url + request.path_qs,
                data=await request.read(),
                headers={k: v for k, v in request.headers.items() if k != "Host"},
            ) as r,
        ):
            body, status, kind = await r.read(), r.status, r.content_type
        self.forwarded += 1
        if self.forwarded == 1:
            await self.release.wait()  # until the test ends: the client gave up long before
        return web.Response(body=body, status=status, content_type=kind)


@pytest.fixture
async def proxy(api: Api) -> AsyncIterator[str]:
    lossy = AnswerLosingProxy(str(api.client.make_url("/")))
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", lossy.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    lossy.release.set()
    await runner.cleanup()


@pytest.mark.parametrize("idempotent", [True, False])
async def test_a_retried_batch_is_stored_once_with_idempotent(
    api: Api, token: str, proxy: str, idempotent: bool
) -> None:
    """The first request is stored but its answer lost; the Producer sends the batch again.
    With ``idempotent=True`` the API answers the repeat as duplicates (stored once); without,
    the jobs are stored twice, as the module documents (at least once)."""
    # The first answer is held until the test ends, so the timeout only has to outlast a
    # forwarded request on a loaded machine: 2 s is far from both.
    acme = Client(proxy, token, timeout_s=2.0)
    async with acme, acme.producer("acme", "orders", idempotent=idempotent) as producer:
        for n in range(50):
            await producer.send(JOB | {"body": {"n": n}})
    assert producer.unavailable == 1 and producer.failed == 0
    if idempotent:
        assert (producer.accepted, producer.duplicates) == (0, 50)
        assert await _backlog(api, token) == 50
    else:
        assert (producer.accepted, producer.duplicates) == (50, 0)
        assert await _backlog(api, token) == 100

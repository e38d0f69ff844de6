"""Hostile clients of ``emq api``: malformed input is a 4xx with the JSON error shape and changes
nothing; slow clients are cut off; connections are limited; the API keeps serving the others.

Input checks run on the app (aiohttp's test server); the connection guards run on the server
``emq api`` itself uses (:func:`emq.api.server.make_runner`) over raw sockets.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from emq.api import ApiSettings, make_app
from emq.api.guard import GuardedRunner
from emq.api.server import make_runner
from emq.compose import open_config, open_queues
from emq.core.errors import ConfigError
from emq.core.interfaces import DeadLetter
from emq.core.model import Namespace, Priority, TopicRef
from emq.core.settings import Settings, load
from tests.api.conftest import ADMIN, Api
from tests.api.test_bad_input import JOB, JOBS, _rejected

SURROGATE = "\\ud800"  # as a client writes it in JSON: a lone surrogate escape


@pytest.fixture
async def seeded(api: Api) -> AsyncIterator[tuple[Api, dict[str, str]]]:
    acme = await api.tenant("acme")
    await api.topic("acme", "orders", 100)
    yield api, acme


@pytest.mark.parametrize(
    ("job", "field"),
    [
        ('{"url": "https://example.com/%s"}', "url"),
        ('{"url": "https://example.com/", "body": "%s"}', "body"),
        ('{"url": "https://example.com/", "body": {"a": ["%s"]}}', "body"),
        ('{"url": "https://example.com/", "headers": {"X-A": "%s"}}', "headers.X-A"),
        ('{"url": "https://example.com/", "key": "k%s"}', "key"),
        ('{"url": "https://example.com/", "idempotency_key": "%s"}', "idempotency_key"),
    ],
)
async def test_a_lone_surrogate_is_422_naming_the_field(
    seeded: tuple[Api, dict[str, str]], snapshot: Any, job: str, field: str
) -> None:
    api, acme = seeded
    data = (job % SURROGATE).encode()
    headers = acme | {"Content-Type": "application/json"}
    await _rejected(api, snapshot, "POST", JOBS, 422, "invalid", field, data=data, headers=headers)
    batch = b'{"jobs": [%s]}' % data
    await _rejected(
        api, snapshot, "POST", JOBS, 422, "invalid", f"jobs[0].{field}", data=batch, headers=headers
    )


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("http://xn--zz/", "url"),
        ("http://\u00ad/", "url"),
        ("http://exa\u200bmple.com/", "url"),
    ],
)
async def test_an_undeliverable_host_is_refused_at_enqueue(
    seeded: tuple[Api, dict[str, str]], snapshot: Any, url: str, field: str
) -> None:
    api, acme = seeded
    await _rejected(
        api, snapshot, "POST", JOBS, 422, "invalid", field, json={"url": url}, headers=acme
    )


async def test_a_header_value_http_cannot_carry_is_refused(
    seeded: tuple[Api, dict[str, str]], snapshot: Any
) -> None:
    api, acme = seeded
    job = JOB | {"headers": {"X-A": "a\x0bb"}}
    await _rejected(
        api, snapshot, "POST", JOBS, 422, "invalid", "headers.X-A", json=job, headers=acme
    )


async def test_json_nested_too_deeply_is_400(
    seeded: tuple[Api, dict[str, str]], snapshot: Any
) -> None:
    api, acme = seeded
    deep = b"[" * 100_000 + b"]" * 100_000
    headers = acme | {"Content-Type": "application/json"}
    error = await _rejected(
        api, snapshot, "POST", JOBS, 400, "malformed", data=deep, headers=headers
    )
    assert "nested too deeply" in error["message"]
    for depth in (900, 990, 1100):  # around the parsers' limits: never a 500
        body = b'{"url": "https://example.com/", "body": ' + b"[" * depth + b"]" * depth + b"}"
        r = await api.client.post(JOBS, data=body, headers=headers)
        assert r.status in (202, 400, 422), (depth, r.status, await r.text())
        assert r.content_type == "application/json"


async def test_a_tenant_name_with_a_lone_surrogate_is_refused(api: Api, snapshot: Any) -> None:
    data = b'{"tenant": "acme", "name": "A%s"}' % SURROGATE.encode()
    headers = ADMIN | {"Content-Type": "application/json"}
    await _rejected(
        api, snapshot, "POST", "/v1/tenants", 422, "invalid", "name", data=data, headers=headers
    )


# ------------------------------------------------------------------ the server's own guards

LIMITS = ApiSettings(header_timeout_s=0.5, body_timeout_s=1.0, max_connections=20)


class Served:
    def __init__(self, runner: GuardedRunner, port: int) -> None:
        self.runner = runner
        self.port = port

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def raw(self, request: bytes) -> tuple[int, dict[str, str], bytes]:
        """Send ``request`` as is; the status, headers and body of the answer."""
        reader, writer = await self.connect()
        writer.write(request)
        try:
            return await read_response(reader)
        finally:
            writer.close()

    async def healthy(self) -> bool:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.port}/openapi.json") as r,
        ):
            return r.status == 200


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


@pytest.fixture
async def serve_api(settings: Settings) -> AsyncIterator[Any]:
    """Start ``emq api``'s server (its runner) with the given limits, on a free port."""
    queues = await open_queues(settings)
    config = await open_config(settings)
    runners: list[GuardedRunner] = []

    async def start(limits: ApiSettings) -> Served:
        runner = make_runner(make_app(settings, limits, config, queues), limits)
        await runner.setup()
        runners.append(runner)
        return Served(runner, await runner.listen("127.0.0.1", 0))

    yield start
    for runner in runners:
        await runner.cleanup()
    await config.aclose()
    await queues.aclose()


@pytest.fixture
async def served(serve_api: Any) -> Served:
    return await serve_api(LIMITS)  # type: ignore[no-any-return]


def _json_error(status: int, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    assert headers["content-type"].startswith("application/json"), (status, headers, body)
    error = json.loads(body)["error"]
    assert error["code"] and error["message"]
    return dict(error)


@pytest.mark.parametrize(
    "request_line",
    [
        b"GET /v1/tenants/\xff\xfe/topics HTTP/1.1",  # invalid UTF-8 in the path
        b"GET /" + b"a" * 9000 + b" HTTP/1.1",  # a request target over 8190 bytes
        b"GET /v1/tenants/%ff%fe/topics HTTP/1.1",  # percent-escaped invalid UTF-8
        b"NOT-HTTP",
    ],
    ids=["utf8", "long", "escaped", "garbage"],
)
async def test_what_aiohttp_refuses_is_answered_in_the_json_error_shape(
    served: Served, request_line: bytes
) -> None:
    status, headers, body = await served.raw(request_line + b"\r\nHost: x\r\n\r\n")
    assert 400 <= status < 500, (status, body)
    _json_error(status, headers, body)
    assert await served.healthy()


@pytest.mark.parametrize(
    ("token", "status"),
    [
        (b"\xff\xfe.abc", 401),
        (b"caf\xc3\xa9.abc", 401),
        (b"../../x.abc", 401),
        (b".abc", 401),
        (b"a\x01b.abc", 400),  # aiohttp's parser refuses it: still the JSON shape
    ],
    ids=["binary", "non-ascii", "path", "no-tenant", "control"],
)
async def test_a_hostile_token_is_refused_in_the_json_error_shape(
    served: Served, token: bytes, status: int
) -> None:
    request = b"GET /v1/tenants/acme/topics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
    got, headers, body = await served.raw(request + token + b"\r\n\r\n")
    assert got == status, body
    _json_error(got, headers, body)


@pytest.mark.serial
async def test_slow_headers_are_cut_off_with_408(served: Served) -> None:
    reader, writer = await served.connect()
    started = time.monotonic()
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
    status, headers, body = await asyncio.wait_for(read_response(reader), 5)
    assert status == 408
    _json_error(status, headers, body)
    assert await reader.read() == b""  # closed
    assert time.monotonic() - started < LIMITS.header_timeout_s + 2.0
    writer.close()
    assert await served.healthy()


@pytest.mark.serial
async def test_headers_trickled_byte_by_byte_are_cut_off_too(served: Served) -> None:
    reader, writer = await served.connect()
    started = time.monotonic()

    async def trickle() -> None:
        for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000:
            writer.write(bytes([byte]))
            await asyncio.sleep(0.05)

    trickling = asyncio.ensure_future(trickle())
    try:
        status, _, _ = await asyncio.wait_for(read_response(reader), 5)
    finally:
        trickling.cancel()
    assert status == 408 and time.monotonic() - started < LIMITS.header_timeout_s + 2.0
    writer.close()


async def test_an_idle_keep_alive_connection_is_not_cut_by_the_header_timeout(
    served: Served,
) -> None:
    reader, writer = await served.connect()
    writer.write(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await read_response(reader))[0] == 200
    await asyncio.sleep(LIMITS.header_timeout_s * 2)  # idle: the keep-alive timeout applies
    writer.write(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await read_response(reader))[0] == 200
    writer.close()


@pytest.mark.serial
async def test_a_slow_body_is_cut_off_with_408_and_nothing_is_stored(
    served: Served, snapshot: Any
) -> None:
    before = await snapshot()
    reader, writer = await served.connect()
    started = time.monotonic()
    writer.write(
        b"POST /v1/tenants HTTP/1.1\r\nHost: x\r\nAuthorization: "
        + ADMIN["Authorization"].encode()
        + b'\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"tenant": '
    )
    status, headers, body = await asyncio.wait_for(read_response(reader), 5)
    assert status == 408
    assert "body" in _json_error(status, headers, body)["message"]
    assert time.monotonic() - started < LIMITS.body_timeout_s + 2.0
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed (after a short linger)
    writer.close()
    assert await snapshot() == before
    assert await served.healthy()


@pytest.mark.serial
async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(
    served: Served,
) -> None:
    reader, writer = await served.connect()
    started = time.monotonic()
    status, _, _ = await asyncio.wait_for(read_response(reader), 5)
    assert status == 408 and time.monotonic() - started < LIMITS.header_timeout_s + 2.0
    assert await reader.read() == b""
    writer.close()


@pytest.mark.serial
async def test_connections_beyond_the_limit_are_refused_at_once_and_others_still_served(
    serve_api: Any,
) -> None:
    limits = ApiSettings(header_timeout_s=60, max_connections=20)  # held open, not timed out
    served = await serve_api(limits)
    held = [await served.connect() for _ in range(limits.max_connections)]
    try:
        reader, writer = await served.connect()
        started = time.monotonic()
        status, headers, body = await asyncio.wait_for(read_response(reader), 5)
        assert status == 503 and time.monotonic() - started < 2.0
        _json_error(status, headers, body)
        assert await reader.read() == b""
        writer.close()
    finally:
        for _, w in held:
            w.close()
    # Once the held connections are gone, new ones are served again.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if await served.healthy():
                break
        except aiohttp.ClientError:
            await asyncio.sleep(0.05)
    assert await served.healthy()


@pytest.mark.serial
async def test_many_slow_clients_are_all_cut_off_and_the_api_serves_others_meanwhile(
    served: Served,
) -> None:
    slow = [await served.connect() for _ in range(LIMITS.max_connections - 2)]
    for _, w in slow:
        w.write(b"POST /v1/tenants HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n")
    assert await served.healthy()  # while they dawdle, others are served
    answers = await asyncio.wait_for(
        asyncio.gather(*(read_response(r) for r, _ in slow)), LIMITS.header_timeout_s + 3
    )
    assert {status for status, _, _ in answers} == {408}
    for _, w in slow:
        w.close()
    assert await served.healthy()


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("EMQ_API_MAX_CONNECTIONS", "0"),
        ("EMQ_API_HEADER_TIMEOUT_S", "-1"),
        ("EMQ_API_BODY_TIMEOUT_S", "soon"),
        ("EMQ_API_KEEPALIVE_TIMEOUT_S", "0"),
    ],
)
def test_a_bad_limit_is_a_one_line_error_naming_the_variable(var: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(ApiSettings, {var: value}, env_prefix="EMQ_API_")
    assert var in str(info.value) and "\n" not in str(info.value)


async def test_the_dlq_lists_an_entry_the_worker_could_not_read(
    seeded: tuple[Api, dict[str, str]],
) -> None:
    api, acme = seeded
    group = TopicRef(Namespace.ONLINE, "acme", "orders").group(0)
    await api.queues.claim(group, 1)
    letter = DeadLetter("", Priority.MEDIUM, b"not \xff json", "unreadable job", None, 1, 0)
    await api.queues.dead_letter(group, 1, [letter])
    r = await api.client.get("/v1/tenants/acme/topics/orders/dlq", headers=acme)
    assert r.status == 200, await r.text()
    (dead,) = (await r.json())["dead"]
    assert dead["job"] is None and dead["raw"] == "not \ufffd json"
    assert dead["error"] == "unreadable job"

"""The push executors on real HTTP over loopback: SSRF matrix, signatures, timeouts, caps.

Every test that pushes runs against both executors (``EMQ_WORKER_HTTP_CLIENT``: the aiohttp
session and the lean protocol client, :mod:`worker.pushers`); the lean client's own edge cases
(crafted responses, TLS) are in ``test_http1*.py``."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks import Webhook

from emq.core.errors import DestinationRefused, Undeliverable
from emq.core.interfaces import PushRequest
from emq.rigs.sink import Sink
from worker.push import parse_retry_after
from worker.pushers import HTTP_CLIENTS, make_pusher
from worker.settings import WorkerSettings
from worker.signing import signature_headers
from worker.ssrf import AddressPolicy

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


class Listener:
    """A raw TCP listener that counts every connection that reaches it."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def start(self, host: str = "127.0.0.1") -> None:
        self.server = await asyncio.start_server(self._accept, host, 0)
        self.port = self.server.sockets[0].getsockname()[1]


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    lst = Listener()
    await lst.start()
    yield lst
    assert lst.server is not None
    lst.server.close()
    await lst.server.wait_closed()


Make = Callable[[WorkerSettings, AddressPolicy], Any]


@pytest.fixture(params=HTTP_CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    """The executor under test: ``lean`` or ``aiohttp``."""
    return str(request.param)


@pytest.fixture
def make(client: str) -> Make:
    """Builds the executor under test (``async with make(settings, policy) as pusher``)."""
    return lambda settings, policy: make_pusher(replace(settings, http_client=client), policy)


def _req(url: str, **kw: Any) -> PushRequest:
    return PushRequest(
        url=url, method="POST", headers=kw.pop("headers", {}), body=b"{}", endpoint="t", **kw
    )


REFUSED_HOSTS = [
    "127.0.0.1",
    "localhost",
    "127.1",
    "2130706433",
    "0x7f000001",
    "0x7f.0.0.1",
    "0177.0.0.1",
    "017700000001",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[64:ff9b::7f00:1]",
    "0.0.0.0",
]


@pytest.mark.parametrize("host", REFUSED_HOSTS)
async def test_no_connection_reaches_a_refused_address(
    listener: Listener, host: str, make: Make
) -> None:
    async with make(WorkerSettings(), AddressPolicy()) as pusher:
        with pytest.raises(DestinationRefused) as info:
            result = await pusher.push(_req(f"http://{host}:{listener.port}/hook"))
            pytest.fail(f"{host} was not refused: {result}")
        assert info.value.retryable is False
    assert listener.connections == 0


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("10.1.2.3", True),
        ("172.16.0.1", True),
        ("192.168.1.1", True),
        ("100.64.0.1", True),  # CGNAT
        ("169.254.169.254", True),  # cloud metadata
        ("169.254.1.1", True),
        ("224.0.0.1", True),
        ("239.255.255.250", True),
        ("255.255.255.255", True),
        ("0.0.0.0", True),
        ("192.0.2.1", True),  # documentation
        ("198.18.0.1", True),  # benchmarking
        ("fe80::1", True),
        ("fc00::1", True),
        ("fd12:3456::1", True),
        ("ff02::1", True),
        ("::", True),
        ("::ffff:10.0.0.1", True),
        ("::ffff:169.254.169.254", True),
        ("2002:7f00:1::", True),  # 6to4 carrying 127.0.0.1
        ("8.8.8.8", False),
        ("1.1.1.1", False),
        ("2606:4700:4700::1111", False),
        ("::ffff:8.8.8.8", False),
    ],
)
def test_address_policy_matrix(address: str, refused: bool) -> None:
    reason = AddressPolicy().refusal(ipaddress.ip_address(address))
    assert (reason is not None) is refused, reason


def test_allowlist_overrides_only_what_it_lists() -> None:
    policy = AddressPolicy([ipaddress.ip_network("10.0.0.0/8")])
    assert policy.refusal(ipaddress.ip_address("10.9.9.9")) is None
    assert policy.refusal(ipaddress.ip_address("::ffff:10.9.9.9")) is None
    assert policy.refusal(ipaddress.ip_address("192.168.0.1")) is not None
    assert policy.refusal(ipaddress.ip_address("127.0.0.1")) is not None


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    async with Sink().serving() as s:
        yield s


async def test_allowlisted_push_is_delivered_signed_and_verifies(sink: Sink, make: Make) -> None:
    body = json.dumps({"order": 1})
    headers = {"Content-Type": "application/json"} | signature_headers(
        SECRET, "msg_1", time.time(), body
    )
    async with make(WorkerSettings(), AddressPolicy(LOOPBACK)) as pusher:
        result = await pusher.push(
            PushRequest(sink.url("hook"), "POST", headers, body.encode(), endpoint="t")
        )
    assert result.status == 200 and result.error is None
    got_headers, got_body = sink.deliveries[0].headers, sink.deliveries[0].body
    assert Webhook(SECRET).verify(got_body, got_headers) == {"order": 1}
    assert "Cookie" not in got_headers and "User-Agent" not in got_headers


async def test_redirects_are_not_followed(sink: Sink, make: Make) -> None:
    sink.behaviour["hook"].status = 302
    sink.behaviour["hook"].headers = {"Location": "http://169.254.169.254/latest"}
    async with make(WorkerSettings(), AddressPolicy(LOOPBACK)) as pusher:
        result = await pusher.push(_req(sink.url("hook")))
    assert result.status == 302
    assert sum(sink.attempts.values()) == 1


@pytest.mark.serial
async def test_timeout_is_an_error_result_not_an_exception(sink: Sink, make: Make) -> None:
    sink.behaviour["slow"].delay_s = 2.0
    settings = WorkerSettings(request_timeout_s=0.3)
    async with make(settings, AddressPolicy(LOOPBACK)) as pusher:
        start = time.monotonic()
        result = await pusher.push(_req(sink.url("slow")))
    assert result.status == 0 and result.error == "timed out"
    assert time.monotonic() - start < 1.5


async def test_connection_refused_is_retryable_result(make: Make) -> None:
    from emq.stack import free_port

    port = free_port()
    async with make(WorkerSettings(), AddressPolicy(LOOPBACK)) as pusher:
        result = await pusher.push(_req(f"http://127.0.0.1:{port}/x"))
    # Both executors name where: the DLQ's reader (and the README walk-through) looks for it.
    assert result.status == 0 and result.error and "connect" in result.error
    assert f"127.0.0.1:{port}" in result.error


@pytest.mark.parametrize(
    ("url", "headers"),
    [
        ("http://xn--zz:{port}/", {}),  # fails IDNA decoding
        ("http://\u00ad:{port}/", {}),  # a soft hyphen: IDNA maps it to nothing
        ("http://a\u200bb:{port}/", {}),  # a zero-width space
        ("http://127.0.0.1:{port}/x\x01", {}),
        ("http://127.0.0.1:{port}/", {"X-Poison": "a\x0bb"}),  # aiohttp: forbidden control char
    ],
)
async def test_a_request_that_cannot_be_sent_is_undeliverable_not_a_crash(
    listener: Listener, url: str, headers: dict[str, str], make: Make, client: str
) -> None:
    async with make(WorkerSettings(), AddressPolicy(LOOPBACK)) as pusher:
        with pytest.raises(Undeliverable) as info:
            await pusher.push(_req(url.format(port=listener.port), headers=headers))
        assert info.value.retryable is False and info.value.message.startswith("undeliverable")
    # A bad URL is refused before connecting; aiohttp checks headers as it writes them, the
    # lean client before it connects.
    assert listener.connections == (1 if headers and client == "aiohttp" else 0)


async def test_a_host_that_resolves_to_nothing_is_a_retryable_result(make: Make) -> None:
    async with make(WorkerSettings(), AddressPolicy()) as pusher:
        result = await pusher.push(_req("http://nothing-here.invalid/x"))
    assert result.status == 0 and result.error and "resolve" in result.error


async def test_response_reads_are_capped(sink: Sink, make: Make) -> None:
    sink.behaviour["big"].body = b"x" * (5 * 1024 * 1024)
    async with make(WorkerSettings(max_response_bytes=1024), AddressPolicy(LOOPBACK)) as pusher:
        result = await pusher.push(_req(sink.url("big")))
    assert result.status == 200


async def test_retry_after_is_parsed_from_the_response(sink: Sink, make: Make) -> None:
    sink.behaviour["busy"].status = 429
    sink.behaviour["busy"].retry_after = "7"
    async with make(WorkerSettings(), AddressPolicy(LOOPBACK)) as pusher:
        result = await pusher.push(_req(sink.url("busy")))
    assert (result.status, result.retry_after_s) == (429, 7.0)


def test_retry_after_forms() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:40 GMT", now) == pytest.approx(20.0)
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None
    assert parse_retry_after("99999999", now) == 24 * 3600.0


@settings(max_examples=200, deadline=None)
@given(
    secret=st.binary(min_size=1, max_size=100),  # (past 64: a key longer than a block)
    prefixed=st.booleans(),
    padded=st.booleans(),
    message_id=st.text(min_size=1, max_size=40),
    stamp=st.integers(min_value=0, max_value=2**34),
    body=st.text(max_size=300),
)
def test_signatures_are_the_reference_packages(
    secret: bytes, prefixed: bool, padded: bool, message_id: str, stamp: int, body: str
) -> None:
    # Our own decoding of the secret (the package has no public accessor) must stay the
    # package's: prefixed or not, padded or not.
    encoded = base64.b64encode(secret).decode()
    text = ("whsec_" if prefixed else "") + (encoded if padded else encoded.rstrip("="))
    ours = signature_headers(text, message_id, stamp + 0.75, body)
    when = datetime.fromtimestamp(stamp, tz=UTC)
    assert ours["webhook-signature"] == Webhook(text).sign(message_id, when, body)
    assert ours["webhook-timestamp"] == str(stamp) and ours["webhook-id"] == message_id

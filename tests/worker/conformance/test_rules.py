"""Invariant 9's rules in the lean client's connection, deterministically (crafted bytes fed to
one connection on a fake transport, split anywhere), and their settings and metric."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from emq.core.errors import ConfigError
from emq.core.model import Namespace, TopicRef
from tests.worker.test_http1 import KEY, FakeTransport, outcome
from worker.http1.connection import DEFAULT_LIMITS, Answer, BadResponse, Connection, Limits
from worker.protocol_errors import ProtocolErrorCollector, ProtocolErrors
from worker.settings import WorkerSettings

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
E500 = b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n"


class Watched:
    """A connection whose protocol errors and releases are recorded."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.reported: list[tuple[str, str]] = []
        self.released: list[Connection] = []
        self.conn = Connection(
            asyncio.get_running_loop(), KEY, self.released.append, lambda c: None, 1024,
            *limits, lambda endpoint, reason: self.reported.append((endpoint, reason)),
        )  # fmt: skip
        self.transport = FakeTransport()
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        self.conn.endpoint = "ns/acme/t"

    def send(self) -> asyncio.Future[Answer]:
        return self.conn.send(b"GET / HTTP/1.1\r\n\r\n", False)

    def feed(self, *chunks: bytes) -> None:
        for chunk in chunks:
            if self.transport.closed:
                return
            self.conn.data_received(chunk)


@pytest.mark.parametrize("stray", [b"H", b"HTTP/1.1 200 OK\r\nX-Smuggled: ", OK, b"\x00junk"])
async def test_bytes_after_a_complete_answer_in_the_same_read_close_the_connection(
    stray: bytes,
) -> None:
    w = Watched()
    fut = w.send()
    w.feed(OK + stray)
    assert outcome(fut) == (200, None)  # the complete answer stands
    assert w.conn.closed and w.transport.aborted
    assert w.reported == [("ns/acme/t", "stray_bytes")]


@given(st.integers(1, len(OK) - 1), st.sampled_from([b"\r\n", b"H", OK]))
@settings(max_examples=30, deadline=None)
def test_a_byte_while_idle_closes_the_connection_however_the_answer_was_split(
    cut: int, stray: bytes
) -> None:
    async def run() -> None:
        w = Watched()
        fut = w.send()
        w.feed(OK[:cut], OK[cut:])
        assert outcome(fut) == (200, None) and w.released == [w.conn] and not w.conn.closed
        w.feed(stray)  # idle: out of turn
        assert w.conn.closed and w.reported == [("ns/acme/t", "stray_bytes")]

    asyncio.run(run())


async def test_a_lying_answer_never_becomes_the_next_requests_answer() -> None:
    w = Watched()
    first = w.send()
    w.feed(OK + b"HTTP/1.1 200 OK\r\nX-Smuggled: ")
    assert outcome(first) == (200, None) and w.conn.closed
    # (the pool skips a closed connection: the next request goes on another one)


@pytest.mark.parametrize("chunk", [1, 7, 4096])
async def test_an_endless_header_ends_at_the_head_limit_whatever_the_reads(chunk: int) -> None:
    w = Watched(Limits(head_bytes=2048, field_bytes=1024, fields=8))
    fut = w.send()
    w.feed(b"HTTP/1.1 200 OK\r\nX-Endless: ")
    fed = 0
    while not w.transport.closed and fed < 1 << 20:
        w.feed(b"a" * chunk)
        fed += chunk
    error = outcome(fut)
    assert isinstance(error, BadResponse) and error.reason in ("head_too_large", "field_too_large")
    assert fed <= 2048 + chunk  # stopped at the limit, not after a megabyte
    assert str(error).startswith("protocol: ")


async def test_too_many_header_fields() -> None:
    w = Watched(Limits(head_bytes=65536, field_bytes=8190, fields=8))
    fut = w.send()
    w.feed(b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 9 + b"Content-Length: 0\r\n\r\n")
    error = outcome(fut)
    assert isinstance(error, BadResponse) and error.reason == "too_many_headers"
    assert str(error) == "protocol: more header fields than the limit (over 8)"
    assert w.reported == [("ns/acme/t", "too_many_headers")] and w.transport.aborted


@pytest.mark.parametrize("read", [1, 3, 10, 1 << 16])
async def test_fields_are_counted_however_the_head_is_read(read: int) -> None:
    def head(fields: int) -> bytes:
        lines = b"".join(b"X-%d: v\r\n" % i for i in range(fields - 1))
        return b"HTTP/1.1 200 OK\r\n" + lines + b"Content-Length: 0\r\n\r\n"

    for fields, allowed in ((7, True), (8, True), (9, False), (40, False)):
        w = Watched(Limits(head_bytes=65536, field_bytes=8190, fields=8))
        fut = w.send()
        data = head(fields)
        w.feed(*(data[i : i + read] for i in range(0, len(data), read)))
        result = outcome(fut)
        if allowed:
            assert result == (200, None), (fields, result)
        else:
            assert isinstance(result, BadResponse) and result.reason == "too_many_headers"


async def test_a_long_field_in_a_head_within_its_limit() -> None:
    w = Watched(Limits(head_bytes=65536, field_bytes=1000, fields=8))
    fut = w.send()
    w.feed(b"HTTP/1.1 200 OK\r\nX-A: " + b"v" * 1001 + b"\r\nContent-Length: 0\r\n\r\n")
    error = outcome(fut)
    assert isinstance(error, BadResponse) and error.reason == "field_too_large"


async def test_1xx_heads_count_against_the_head_limit_and_fields_per_head() -> None:
    w = Watched(Limits(head_bytes=4096, field_bytes=1024, fields=2))
    fut = w.send()
    w.feed(b"HTTP/1.1 103 Hints\r\nLink: a\r\nLink: b\r\n\r\n" + OK)  # 2 fields each: fine
    assert outcome(fut) == (200, None)
    fut = w.send()
    w.feed(b"HTTP/1.1 100 Continue\r\n\r\n" * 200)
    error = outcome(fut)
    assert isinstance(error, BadResponse) and error.reason == "head_too_large"


async def test_a_reset_does_not_end_a_close_delimited_body() -> None:
    w = Watched()
    fut = w.send()
    w.feed(b"HTTP/1.0 200 OK\r\n\r\nhalf a bo")
    w.conn.connection_lost(ConnectionResetError("reset by peer"))
    assert isinstance(outcome(fut), ConnectionError)
    w = Watched()
    fut = w.send()
    w.feed(b"HTTP/1.0 200 OK\r\n\r\nall of it")
    w.conn.connection_lost(None)  # a clean close ends it
    assert outcome(fut) == (200, None)


@pytest.mark.parametrize("reason", [b"O\x00K", b"O\x01K", b"O\x7fK", b""])
async def test_the_reason_phrase_is_ignored_whatever_it_holds(reason: bytes) -> None:
    w = Watched()
    fut = w.send()
    w.feed(b"HTTP/1.1 204 " + reason + b"\r\nContent-Length: 0\r\n\r\n")
    assert outcome(fut) == (204, None) and w.released == [w.conn]


def test_the_head_limits_are_settings_with_units_and_checked_together() -> None:
    s = WorkerSettings(max_response_head_bytes=4096, max_response_field_bytes=2048)
    assert (s.max_response_head_bytes, s.max_response_field_bytes) == (4096, 2048)
    assert WorkerSettings().max_response_headers == 128
    with pytest.raises(ConfigError, match="EMQ_WORKER_MAX_RESPONSE_FIELD_BYTES"):
        WorkerSettings(max_response_head_bytes=4096, max_response_field_bytes=8190)
    with pytest.raises(ConfigError, match="EMQ_WORKER_MAX_RESPONSE_HEADERS"):
        WorkerSettings(max_response_headers=0)


def test_the_metric_names_each_topic_and_reason() -> None:
    errors = ProtocolErrors()
    ref = TopicRef(Namespace.ONLINE, "acme", "hooks")
    errors.count(str(ref), "stray_bytes")
    errors.count(str(ref), "stray_bytes")
    errors.count("gone/topic", "malformed")  # a topic no longer the worker's
    registry = CollectorRegistry()
    registry.register(ProtocolErrorCollector(errors, {ref: object()}))
    text = generate_latest(registry).decode()
    labels = f'namespace="{ref.namespace.value}",reason="stray_bytes",tenant="acme",topic="hooks"'
    assert f"emq_push_protocol_errors_total{{{labels}}} 2.0" in text
    assert 'reason="malformed",tenant="",topic="gone/topic"} 1.0' in text

"""The lean client's parts, deterministically: crafted responses fed to one connection (split
anywhere, chunked, closed, garbage, 1xx, HEAD, past the cap) and the request bytes it writes."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import httptools
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emq.core.errors import DestinationRefused, Undeliverable
from worker.http1.connection import Answer, BadResponse, Connection, ConnectionLost
from worker.http1.deadlines import Deadlines
from worker.http1.wire import Target, request_bytes, target_of
from worker.ssrf import AddressPolicy

KEY = ("http", "example.com", 80)
PUBLIC = AddressPolicy()


class FakeTransport:
    """What a connection writes, and whether it closed or aborted the transport."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True


class Exchange:
    """One connection on a fake transport: send a request, feed it response bytes."""

    def __init__(self, max_body: int = 1024) -> None:
        self.loop = asyncio.get_running_loop()
        self.released: list[Connection] = []
        self.conn = Connection(self.loop, KEY, self.released.append, lambda c: None, max_body)
        self.transport = FakeTransport()
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]

    def send(self, head: bool = False) -> asyncio.Future[Answer]:
        return self.conn.send(b"GET / HTTP/1.1\r\n\r\n", head)

    def feed(self, *chunks: bytes, eof: bool = False) -> None:
        for chunk in chunks:
            if self.transport.closed:
                return  # a closed transport reads no more
            self.conn.data_received(chunk)
        if eof:
            self.conn.connection_lost(None)

    @property
    def reusable(self) -> bool:
        return self.released == [self.conn] and not self.conn.closed


def outcome(fut: asyncio.Future[Answer]) -> Any:
    assert fut.done(), "no answer yet"
    return fut.exception() or fut.result()[:2]  # (status, Retry-After; the rest: the attempt log)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


async def test_a_plain_answer_returns_the_connection_to_the_pool() -> None:
    x = Exchange()
    fut = x.send()
    x.feed(OK)
    assert outcome(fut) == (200, None) and x.reusable
    assert x.transport.written == [b"GET / HTTP/1.1\r\n\r\n"]


async def test_an_answer_split_at_every_byte() -> None:
    response = b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nContent-Length: 5\r\n\r\nhello"
    x = Exchange()
    fut = x.send()
    x.feed(*(response[i : i + 1] for i in range(len(response))))
    assert outcome(fut) == (503, b"7") and x.reusable


async def test_retry_after_in_any_case_and_among_other_headers() -> None:
    x = Exchange()
    fut = x.send()
    x.feed(b"HTTP/1.1 429 No\r\nDate: x\r\nRETRY-AFTER: 120\r\nX-A: b\r\nContent-Length: 0\r\n\r\n")
    assert outcome(fut) == (429, b"120")


async def test_a_chunked_body_split_across_reads_keeps_the_connection() -> None:
    x = Exchange()
    fut = x.send()
    x.feed(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhel",
        b"lo\r\n0\r\nTrailer-A: b\r\n",
    )
    assert not fut.done()  # the trailers are not complete yet
    x.feed(b"\r\n")
    assert outcome(fut) == (200, None) and x.reusable


async def test_connection_close_answers_and_closes() -> None:
    x = Exchange()
    fut = x.send()
    x.feed(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
    assert outcome(fut) == (200, None)
    assert x.released == [] and x.transport.closed


async def test_http10_without_keep_alive_is_not_reused() -> None:
    x = Exchange()
    fut = x.send()
    x.feed(b"HTTP/1.0 204 No Content\r\n\r\n")
    assert outcome(fut) == (204, None) and x.released == [] and x.transport.closed


async def test_a_body_past_the_cap_ends_the_read_with_the_status() -> None:
    x = Exchange(max_body=10)
    fut = x.send()
    x.feed(b"HTTP/1.1 201 Created\r\nContent-Length: 100000\r\n\r\n" + b"x" * 11)
    assert outcome(fut) == (201, None)
    assert x.released == [] and x.transport.closed


async def test_a_cap_of_zero_still_reuses_an_empty_body() -> None:
    x = Exchange(max_body=0)
    fut = x.send()
    x.feed(OK)
    assert outcome(fut) == (200, None) and x.reusable


async def test_a_body_delimited_by_the_close_is_an_answer() -> None:
    x = Exchange()
    fut = x.send()
    x.feed(b"HTTP/1.1 200 OK\r\n\r\nsome body")
    assert not fut.done()
    x.feed(eof=True)
    assert outcome(fut) == (200, None) and x.released == []


async def test_a_body_in_a_coding_that_is_not_chunked_ends_at_the_close() -> None:
    x = Exchange()
    fut = x.send()
    x.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n\x1f\x8b...")
    assert not fut.done()
    x.feed(eof=True)
    assert outcome(fut) == (200, None) and x.released == []


async def test_a_body_cut_short_is_a_lost_connection() -> None:
    x = Exchange()
    fut = x.send()
    x.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", eof=True)
    assert isinstance(outcome(fut), ConnectionLost)


@pytest.mark.parametrize(
    "garbage",
    [
        b"HELLO\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"\x00\x01\x02\x03",
    ],
)
async def test_garbage_is_a_bad_response_and_the_connection_is_dropped(garbage: bytes) -> None:
    x = Exchange()
    fut = x.send()
    x.feed(garbage)
    assert isinstance(outcome(fut), BadResponse)
    assert x.transport.aborted and x.conn.closed and x.released == []


async def test_informational_answers_are_skipped() -> None:
    x = Exchange()
    fut = x.send()
    x.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
    assert not fut.done()
    x.feed(b"HTTP/1.1 204 No Content\r\nRetry-After: 3\r\n\r\n")
    assert outcome(fut) == (204, b"3") and x.reusable


async def test_a_head_answer_does_not_wait_for_the_announced_body() -> None:
    x = Exchange()
    fut = x.send(head=True)
    x.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
    assert outcome(fut) == (200, None) and x.released == [] and x.transport.closed


async def test_switching_protocols_is_an_answer_on_a_closed_connection() -> None:
    x = Exchange()
    fut = x.send()
    x.feed(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
    assert outcome(fut) == (101, None) and x.released == [] and x.conn.closed


async def test_a_close_before_any_byte_is_a_lost_connection() -> None:
    x = Exchange()
    fut = x.send()
    x.conn.connection_lost(ConnectionResetError(104, "Connection reset by peer"))
    error = outcome(fut)
    assert isinstance(error, ConnectionLost) and "reset" in str(error)


async def test_a_second_answer_nobody_asked_for_drops_the_connection() -> None:
    x = Exchange()
    fut = x.send()
    x.feed(OK + OK)
    assert outcome(fut) == (200, None)
    assert x.conn.closed and x.transport.aborted  # popped from the pool, it is skipped


async def test_bytes_while_idle_drop_the_connection() -> None:
    x = Exchange()
    x.feed(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
    assert x.conn.closed and x.transport.aborted


async def test_an_expired_request_fails_and_aborts_an_ended_one_is_left_alone() -> None:
    x = Exchange()
    fut = x.send()
    x.feed(OK)
    x.conn.expire(x.conn.sent)  # ended: nothing happens
    assert outcome(fut) == (200, None) and not x.transport.closed
    fut = x.send()
    x.feed(b"HTTP/1.1 200 OK\r\n")  # headers never complete
    x.conn.expire(x.conn.sent - 1)  # an earlier request's deadline: not this one's
    assert not fut.done()
    x.conn.expire(x.conn.sent)
    assert isinstance(outcome(fut), TimeoutError)
    assert x.transport.aborted and x.released == [x.conn]  # (from the first request)


async def test_deadlines_fail_only_requests_past_theirs() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop, period_s=0.01)
    ended, late, live = Exchange(), Exchange(), Exchange()
    futs = [x.send() for x in (ended, late, live)]
    now = loop.time()
    deadlines.add(now - 1, ended.conn)
    deadlines.add(now - 1, late.conn)
    deadlines.add(now + 60, live.conn)
    ended.feed(OK)
    deadlines.check()
    assert outcome(futs[0]) == (200, None)
    assert isinstance(outcome(futs[1]), TimeoutError)
    assert not futs[2].done() and len(deadlines) == 1
    deadlines.close()
    live.conn.abort()


async def test_a_connection_carries_requests_one_after_another() -> None:
    x = Exchange()
    for status in (200, 500, 202):
        fut = x.send()
        x.feed(b"HTTP/1.1 %d X\r\nContent-Length: 1\r\n\r\n." % status)
        assert outcome(fut) == (status, None)
    assert x.released == [x.conn] * 3 and not x.transport.closed


# ------------------------------------------------------------------ request bytes


def _target(url: str) -> Target:
    return target_of(url, PUBLIC)


IDNA = "xn--bcher-kva.example"
TARGETS = [  # url, Host header, request target, pool key
    ("http://example.com/hook", "example.com", "/hook", ("http", "example.com", 80)),
    ("http://example.com:80", "example.com", "/", ("http", "example.com", 80)),
    ("https://example.com:443/a?b=1&c", "example.com", "/a?b=1&c", ("https", "example.com", 443)),
    ("http://example.com:8080/x", "example.com:8080", "/x", ("http", "example.com", 8080)),
    ("https://[2606:4700::1]:8443/", "[2606:4700::1]:8443", "/", ("https", "2606:4700::1", 8443)),
    ("http://bücher.example/ä", IDNA, "/%C3%A4", ("http", IDNA, 80)),
]  # fmt: skip


@pytest.mark.parametrize(("url", "host_header", "path", "key"), TARGETS)
def test_targets(url: str, host_header: str, path: str, key: tuple[str, str, int]) -> None:
    t = _target(url)
    assert (t.host_header, t.path, t.key) == (host_header, path, key)
    assert t.tls is (key[0] == "https")


def test_a_refused_literal_is_refused_with_the_url() -> None:
    with pytest.raises(DestinationRefused):
        _target("http://10.0.0.1/x")
    allowed = AddressPolicy([ipaddress.ip_network("10.0.0.0/8")])
    assert target_of("http://10.0.0.1/x", allowed).host == "10.0.0.1"


def test_request_bytes_framing() -> None:
    t = _target("http://example.com:8080/x?y=1")
    assert request_bytes("GET", t, {}, None) == (
        b"GET /x?y=1 HTTP/1.1\r\nHost: example.com:8080\r\n\r\n"
    )
    assert request_bytes("POST", t, {"A": "b"}, None).endswith(b"A: b\r\nContent-Length: 0\r\n\r\n")
    sent = request_bytes("PUT", t, {"Content-Type": "text/plain"}, "é".encode())
    assert sent.endswith(b"Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n\xc3\xa9")
    assert request_bytes("GET", t, {"X": "tab\tok ü"}, None).count(b"X: tab\tok \xc3\xbc\r\n") == 1


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("POST", {"Host": "evil.example"}),
        ("POST", {"content-length": "5"}),
        ("POST", {"Transfer-Encoding": "chunked"}),
        ("POST", {"Connection": "close"}),
        ("POST", {"X Y": "a"}),
        ("POST", {"X:Y": "a"}),
        ("POST", {"": "a"}),
        ("POST", {"X\nHost": "evil.example"}),
        ("POST", {"X-A\n": "a", "X-B": "b"}),
        ("POST", {"X-A": "a", "\nX-B": "b"}),
        ("POST", {"X-A": "a\r\nX-Injected: 1"}),
        ("POST", {"X-A": "a\nb"}),
        ("POST", {"X-A": "a\x00b"}),
        ("POST", {"X-A": "a\x7fb"}),
        ("POST", {"X-A": "\ud800"}),
        ("POST", {"X-A": 5}),
        ("GET / HTTP/1.1\r\nX:", {}),
        ("get", {}),
    ],
)
def test_what_http_cannot_carry_is_undeliverable(method: str, headers: dict[str, Any]) -> None:
    with pytest.raises(Undeliverable):
        request_bytes(method, _target("http://example.com/"), headers, b"{}")


class _Parsed:
    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.url = b""
        self.body = b""
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


TOKEN = st.text(alphabet="!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFXYZ", min_size=1)
VALUE = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x7f").filter(
        lambda c: c == "\t" or ord(c) >= 0x20
    ),
    max_size=40,
).map(str.strip)  # (leading and trailing spaces are not part of a field value: RFC 9110 5.5)


@settings(max_examples=200, deadline=None)
@given(
    headers=st.dictionaries(TOKEN, VALUE, max_size=6).filter(
        lambda h: len({k.lower() for k in h}) == len(h)
        and not {k.lower() for k in h} & {"host", "content-length", "transfer-encoding",
                                           "connection", "keep-alive", "upgrade", "te",
                                           "trailer", "proxy-connection", "proxy-authorization"}
    ),
    body=st.binary(max_size=100),
    method=st.sampled_from(["POST", "PUT", "PATCH", "DELETE"]),
)  # fmt: skip
def test_what_is_written_parses_back_as_sent(
    headers: dict[str, str], body: bytes, method: str
) -> None:
    data = request_bytes(method, _target("http://example.com:81/p?q=1"), headers, body)
    parsed = _Parsed()
    parser = httptools.HttpRequestParser(parsed)
    parser.feed_data(data)
    assert parsed.complete and parser.get_method() == method.encode()
    assert parsed.url == b"/p?q=1" and parsed.body == body
    sent = [(k.encode(), v.encode()) for k, v in headers.items()]
    length = (b"Content-Length", str(len(body)).encode())
    assert parsed.headers == [(b"Host", b"example.com:81"), *sent, length]

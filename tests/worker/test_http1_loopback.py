"""The push executors against real receivers on loopback: keep-alive and what breaks it (a
receiver that closes, resets, sends garbage, answers ``Connection: close`` or hangs), and TLS
with a self-signed CA (verification, SNI), for both executors where the guarantee is shared."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest
import trustme

from emq.core.interfaces import NotSent, PushRequest
from worker.http1 import LeanPusher
from worker.http1.pool import KEEPALIVE_S
from worker.pushers import HTTP_CLIENTS, make_pusher
from worker.settings import WorkerSettings
from worker.ssrf import AddressPolicy

LOOPBACK = AddressPolicy((ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")))
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
Script = Callable[[int, int], bytes | None]  # (connection no., request no. on it) -> reply


class Receiver:
    """A raw HTTP/1.1 receiver: reads each request (head and Content-Length body) and replies
    as ``script`` says; ``b"close"`` closes, ``b"reset"`` resets, ``None`` hangs."""

    def __init__(self, script: Script, tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0
        self._handlers: set[asyncio.Task[Any]] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn, n = self.connections, 0
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.requests.append(head + await reader.readexactly(length))
                reply = self.script(conn, n)
                n += 1
                if reply is None:
                    await asyncio.Event().wait()  # hang until the client gives up
                elif reply == b"reset":
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                elif reply == b"close":
                    break
                else:
                    writer.write(reply)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> Receiver:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for task in self._handlers:
            task.cancel()  # (a hanging reply waits forever)
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self.server.wait_closed()

    def url(self, path: str = "hook", host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}/{path}"


def _req(url: str) -> PushRequest:
    return PushRequest(url, "POST", {"Content-Type": "application/json"}, b"{}", "t")


@pytest.fixture
async def pusher() -> AsyncIterator[LeanPusher]:
    async with LeanPusher(WorkerSettings(request_timeout_s=2.0), LOOPBACK) as p:
        yield p


async def test_keep_alive_carries_every_request_on_one_connection(pusher: LeanPusher) -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    async with Receiver(lambda c, n: chunked if n % 2 else OK) as rx:
        for _ in range(6):
            assert (await pusher.push(_req(rx.url()))).status == 200
    assert rx.connections == 1 and len(rx.requests) == 6
    assert rx.requests[0].startswith(b"POST /hook HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % rx.port)


async def test_every_push_asks_its_gate_right_before_writing(pusher: LeanPusher) -> None:
    # The worker's pacing window has half a millisecond for what lies between a request's last
    # look at its quota grant and its write (LeanPusher.write_margin_s): the gate is asked
    # right before every write, on a new connection and on a kept one alike.
    asked: list[bool] = []

    def gate(answer: bool) -> Callable[[], bool]:
        return lambda: asked.append(answer) or answer

    async with Receiver(lambda c, n: OK) as rx:
        with pytest.raises(NotSent):  # a new connection, the gate says no: nothing written
            await pusher.push(_req(rx.url())._replace(gate=gate(False)))
        await asyncio.sleep(0.05)  # (the receiver would have read a request by now)
        assert (asked, rx.connections, rx.requests) == ([False], 1, [])
        assert pusher.connections == 1  # kept for the next push
        with pytest.raises(NotSent):  # the kept connection, the gate says no: nothing written
            await pusher.push(_req(rx.url())._replace(gate=gate(False)))
        await asyncio.sleep(0.05)
        assert (asked, rx.connections, rx.requests) == ([False, False], 1, [])
        before = time.time()
        result = await pusher.push(_req(rx.url())._replace(gate=gate(True)))
        assert result.status == 200 and asked == [False, False, True]
        assert before <= result.sent_at <= time.time()  # when it was written: after the gate
        assert len(rx.requests) == 1 and rx.connections == 1 and pusher.connections == 1
        # The first connection busy (its next request hangs): a second one, the gate asked.
        rx.script = lambda c, n: None if (c, n) == (0, 1) else OK
        hanging = asyncio.create_task(pusher.push(_req(rx.url())))
        while len(rx.requests) < 2:
            await asyncio.sleep(0.01)
        assert (await pusher.push(_req(rx.url())._replace(gate=gate(True)))).status == 200
        assert asked == [False, False, True, True] and rx.connections == 2
        hanging.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hanging


async def test_a_write_later_than_the_margin_after_the_gate_is_told_before_its_answer(
    pusher: LeanPusher,
) -> None:
    # The worker's spare lane (worker.groups SpareLaneLog) needs every late write's grant moved
    # before the grant a quota later can be made: the pusher tells it right after the write
    # (the request's ``written``), not with the answer, on a new connection and a kept one.
    told: list[float] = []

    def slow_gate() -> bool:  # the CPU taken away between the look at the grant and the write
        time.sleep(0.003)
        return True

    async with Receiver(lambda c, n: OK if n == 0 else None) as rx:  # (then it never answers)
        before = time.time()
        result = await pusher.push(_req(rx.url())._replace(gate=slow_gate, written=told.append))
        assert result.status == 200 and told == [result.sent_at]  # a new connection
        assert before + 0.003 <= told[0] <= time.time()
        before = time.time()
        push = asyncio.create_task(
            pusher.push(_req(rx.url())._replace(gate=slow_gate, written=told.append))
        )
        for _ in range(200):
            if len(told) == 2 or push.done():
                break
            await asyncio.sleep(0.005)
        assert len(told) == 2 and not push.done()  # told while its answer is still awaited
        assert before + 0.003 <= told[1] <= time.time() and rx.connections == 1
        push.cancel()
        with pytest.raises(asyncio.CancelledError):
            await push
        # On time (the gate answers at once): not told, but for a write the machine delayed.
        rx.script = lambda c, n: OK
        on_time = [_req(rx.url())._replace(gate=lambda: True, written=told.append)] * 20
        for request in on_time:
            assert (await pusher.push(request)).status == 200
        assert len(told) <= 2 + 2


async def test_connection_close_is_honoured(pusher: LeanPusher) -> None:
    close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    async with Receiver(lambda c, n: close) as rx:
        for _ in range(3):
            assert (await pusher.push(_req(rx.url()))).status == 200
    assert rx.connections == 3


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (b"close", "ConnectionLost"),
        (b"reset", "ConnectionLost"),
        (b"SMTP ready\r\n\r\n", "protocol: not an HTTP/1.1 response"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort", None),  # then it hangs
    ],
)
async def test_a_broken_answer_is_a_retryable_result_and_the_next_push_reconnects(
    reply: bytes, error: str | None
) -> None:
    # Connection 0 breaks on its first request; every later connection answers 200.
    async with (
        Receiver(lambda c, n: reply if c == 0 else OK) as rx,
        LeanPusher(WorkerSettings(request_timeout_s=0.5), LOOPBACK) as pusher,
    ):
        result = await pusher.push(_req(rx.url()))
        assert result.status == 0, result
        assert result.error is not None and result.error.startswith(error or "timed out")
        assert (await pusher.push(_req(rx.url()))).status == 200
    assert rx.connections == 2


@pytest.mark.parametrize("client", HTTP_CLIENTS)
async def test_a_receiver_that_hangs_ends_at_the_total_timeout(client: str) -> None:
    settings = WorkerSettings(request_timeout_s=0.3, http_client=client)
    async with (
        Receiver(lambda c, n: None if c == 0 else OK) as rx,
        make_pusher(settings, LOOPBACK) as pusher,
    ):
        loop = asyncio.get_running_loop()
        start = loop.time()
        result = await pusher.push(_req(rx.url()))
        assert (result.status, result.error) == (0, "timed out")
        assert loop.time() - start < 1.5
        assert (await pusher.push(_req(rx.url()))).status == 200
    assert rx.connections == 2


async def test_a_cancelled_push_drops_its_connection(pusher: LeanPusher) -> None:
    async with Receiver(lambda c, n: None if c == 0 else OK) as rx:
        task = asyncio.create_task(pusher.push(_req(rx.url())))
        while not rx.requests:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await pusher.push(_req(rx.url()))).status == 200
    assert rx.connections == 2


# ------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _server_context(ca: trustme.CA, names: tuple[str, ...], seen: list[str | None]) -> Any:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(ctx)
    ctx.sni_callback = lambda sock, name, _: seen.append(name)
    return ctx


def _trusting(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


@pytest.mark.parametrize("client", HTTP_CLIENTS)
async def test_tls_is_verified_and_sni_is_the_urls_host(ca: trustme.CA, client: str) -> None:
    seen: list[str | None] = []
    settings = WorkerSettings(http_client=client)
    async with (
        Receiver(lambda c, n: OK, _server_context(ca, ("localhost",), seen)) as rx,
        make_pusher(settings, LOOPBACK, _trusting(ca)) as pusher,
    ):
        for _ in range(2):
            result = await pusher.push(_req(rx.url(host="localhost", scheme="https")))
            assert result.status == 200, result
    assert seen == ["localhost"]  # one handshake: the second push kept the connection
    assert rx.requests[0].startswith(b"POST /hook HTTP/1.1\r\nHost: localhost:%d\r\n" % rx.port)


@pytest.mark.parametrize("client", HTTP_CLIENTS)
@pytest.mark.parametrize("case", ["untrusted", "wrong-name"])
async def test_tls_that_does_not_verify_is_a_connect_failure(
    ca: trustme.CA, client: str, case: str
) -> None:
    names = ("localhost",) if case == "untrusted" else ("other.example",)
    trust = None if case == "untrusted" else _trusting(ca)
    settings = replace(WorkerSettings(), http_client=client)
    async with (
        Receiver(lambda c, n: OK, _server_context(ca, names, [])) as rx,
        make_pusher(settings, LOOPBACK, trust) as pusher,
    ):
        result = await pusher.push(_req(rx.url(host="localhost", scheme="https")))
    assert result.status == 0 and result.error is not None
    error = result.error.lower()
    assert "connect" in error and f"localhost:{rx.port}" in error and "certificate" in error
    assert rx.requests == []


async def test_idle_connections_past_keep_alive_are_closed_by_the_sweep(
    pusher: LeanPusher,
) -> None:
    async with Receiver(lambda c, n: OK) as rx:
        assert (await pusher.push(_req(rx.url()))).status == 200
        assert pusher.connections == 1
        pusher.sweep(asyncio.get_running_loop().time() + KEEPALIVE_S - 1)  # not yet
        assert (await pusher.push(_req(rx.url()))).status == 200
        assert rx.connections == 1
        pusher.sweep(asyncio.get_running_loop().time() + KEEPALIVE_S + 1)
        assert (await pusher.push(_req(rx.url()))).status == 200
    assert rx.connections == 2


async def test_closing_the_executor_ends_pushes_in_flight() -> None:
    async with Receiver(lambda c, n: None) as rx:
        pusher = LeanPusher(WorkerSettings(), LOOPBACK)
        task = asyncio.create_task(pusher.push(_req(rx.url())))
        while not rx.requests:
            await asyncio.sleep(0.01)
        await pusher.aclose()
        result = await asyncio.wait_for(task, 5)
    assert result.status == 0 and result.error is not None and "closed" in result.error

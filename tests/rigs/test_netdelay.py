"""The delaying TCP proxy (:mod:`emq.rigs.netdelay`): bytes arrive whole and in order both ways,
each way ``rtt / 2`` late, closes and resets travel to the other side, and a backend that refuses
a connection costs that connection only.

The upper bounds on delays are generous (a loaded machine is slow); the lower ones are the
promise of the proxy. Each test runs on uvloop (as the proxy's process does) and on asyncio's
own loop (their transports differ: uvloop reads before a protocol can pause it)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
import uvloop

from emq.rigs.netdelay import DelayProxy
from emq.stack import free_port

Runner = Callable[[Coroutine[Any, Any, None]], None]
LOOPS = pytest.mark.parametrize("run", [uvloop.run, asyncio.run], ids=["uvloop", "asyncio"])


class Backend:
    """An asyncio server: echoes what it reads, and remembers each connection's end."""

    def __init__(self) -> None:
        self.ended: list[str] = []  # "eof" or "reset", per connection, once it ends
        self.writers: list[asyncio.StreamWriter] = []
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            self.ended.append("eof")
        except ConnectionError:
            self.ended.append("reset")
        finally:
            writer.close()

    @contextlib.asynccontextmanager
    async def serving(self, port: int = 0) -> AsyncIterator[Backend]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            server.close()
            for writer in self.writers:
                writer.close()


async def _until(check: object, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.01)
    return False


@LOOPS
def test_many_chunks_arrive_whole_and_in_order_both_ways(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    run(_many_chunks_arrive_whole_and_in_order_both_ways())


async def _many_chunks_arrive_whole_and_in_order_both_ways() -> None:
    rng = random.Random(7)
    chunks = [rng.randbytes(rng.randint(1, 40_000)) for _ in range(600)]
    sent = b"".join(chunks)
    async with (
        Backend().serving() as backend,
        DelayProxy.running(("127.0.0.1", backend.port), 0.004) as proxy,
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)

        async def write() -> None:
            for i, chunk in enumerate(chunks):
                writer.write(chunk)
                if i % 50 == 0:
                    await asyncio.sleep(0.003)  # gaps: the queue empties and refills
                await writer.drain()

        writing = asyncio.ensure_future(write())
        echoed = await asyncio.wait_for(reader.readexactly(len(sent)), 30)
        await writing
        writer.close()
    assert echoed == sent  # ~12 MB through both directions, several MiB queued at a time


@LOOPS
def test_each_round_trip_takes_at_least_the_set_rtt(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    run(_each_round_trip_takes_at_least_the_set_rtt())


async def _each_round_trip_takes_at_least_the_set_rtt() -> None:
    rtt_s = 0.006
    async with (
        Backend().serving() as backend,
        DelayProxy.running(("127.0.0.1", backend.port), rtt_s) as proxy,
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        trips = []
        for i in range(30):
            started = time.monotonic()
            writer.write(b"ping %d\n" % i)
            assert await reader.readline() == b"ping %d\n" % i
            trips.append(time.monotonic() - started)
        writer.close()
    assert min(trips) >= rtt_s, trips
    assert sorted(trips)[len(trips) // 2] < rtt_s + 0.1, trips


@LOOPS
def test_without_delay_bytes_pass_at_once(run: Runner) -> None:
    run(_without_delay_bytes_pass_at_once())


async def _without_delay_bytes_pass_at_once() -> None:
    async with (
        Backend().serving() as backend,
        DelayProxy.running(("127.0.0.1", backend.port), 0.0) as proxy,
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"x" * 100_000)
        assert await asyncio.wait_for(reader.readexactly(100_000), 10) == b"x" * 100_000
        writer.close()


@LOOPS
def test_a_client_close_closes_the_backend_connection_and_back(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    run(_a_client_close_closes_the_backend_connection_and_back())


async def _a_client_close_closes_the_backend_connection_and_back() -> None:
    async with (
        Backend().serving() as backend,
        DelayProxy.running(("127.0.0.1", backend.port), 0.01) as proxy,
    ):
        # the client closes: the backend reads the end of stream, after the last bytes
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"last words")
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 10) == b"last words"  # then the end
        assert await _until(lambda: backend.ended == ["eof"]), backend.ended
        writer.close()
        # the backend closes: the client reads the end of stream
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"hi")
        assert await reader.readexactly(2) == b"hi"
        backend.writers[-1].close()
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        assert await _until(lambda: not proxy.open_sockets()), proxy.open_sockets()


@LOOPS
def test_a_reset_on_either_side_resets_or_closes_the_other(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    run(_a_reset_on_either_side_resets_or_closes_the_other())


async def _a_reset_on_either_side_resets_or_closes_the_other() -> None:
    async with (
        Backend().serving() as backend,
        DelayProxy.running(("127.0.0.1", backend.port), 0.01) as proxy,
    ):
        client = socket.create_connection(("127.0.0.1", proxy.port))
        client.sendall(b"x")
        assert await _until(lambda: len(backend.writers) == 1)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset (RST), not a FIN
        assert await _until(lambda: len(backend.ended) == 1), backend.ended
        # the backend resets: the client's connection ends too
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"y")
        assert await reader.readexactly(1) == b"y"
        sock = backend.writers[-1].get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        backend.writers[-1].transport.abort()
        with contextlib.suppress(ConnectionResetError):  # (reset or closed: either)
            assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        assert await _until(lambda: not proxy.open_sockets()), proxy.open_sockets()


@LOOPS
def test_the_proxy_survives_a_backend_that_refuses(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    run(_the_proxy_survives_a_backend_that_refuses())


async def _the_proxy_survives_a_backend_that_refuses() -> None:
    port = free_port()  # nothing listens there yet
    async with DelayProxy.running(("127.0.0.1", port), 0.002) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        with contextlib.suppress(
            ConnectionResetError
        ):  # (aborted: either is the connection refused)
            assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        async with Backend().serving(port):
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"again\n")
            assert await asyncio.wait_for(reader.readline(), 10) == b"again\n"
            writer.close()

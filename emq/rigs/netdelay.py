"""A delaying TCP proxy: a network hop of a chosen round-trip time in front of a server.

    python -m emq.rigs.netdelay --listen 127.0.0.1:PORT --to 127.0.0.1:6390 --rtt-ms 2

The benchmarks put Redis behind it (``emq bench dispatch --redis-rtt-ms``) because these machines'
kernel has no ``tc netem``. Every connection accepted on ``--listen`` gets a connection of its own
to ``--to``; each byte read on either side is written to the other side ``rtt / 2`` after it was
read. It runs as its own process, so a benchmark reads its CPU apart from the worker's.

How a direction (a :class:`Link`) works: a chunk read at time ``t`` joins the link's queue as
``(t + rtt/2, chunk)``; since the delay is the same for every chunk, the queue is in due order and
the byte stream keeps its order (nothing is reordered or merged across connections). One timer for
the whole process fires at the earliest due time of all links and writes every chunk that is due.
That timer is a Linux ``timerfd`` watched by the event loop: uvloop's own timers round to whole
milliseconds (libuv), which would turn a 0.25 ms one-way delay into 0 or 1 ms, and polling would
spend CPU while idle. With ``--rtt-ms 0`` a chunk is written as soon as it is read.

Closing: an end of stream (FIN) travels like a chunk and half-closes the other side when it is due;
once both directions have ended, both sockets close. A reset (or any error) on one side aborts the
other at once. A backend that refuses the connection gets the client's connection closed; the
proxy goes on accepting. Reading pauses while the other side's socket buffer is full or a link
holds more than ``MAX_QUEUED_BYTES``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import heapq
import itertools
import logging
import os
import re
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, cast

log = logging.getLogger(__name__)

MAX_QUEUED_BYTES = 4 << 20
RESUME_BELOW_BYTES = 1 << 20
_EOF = b""  # the end-of-stream marker in a link's queue (a read chunk is never empty)


# --------------------------------------------------------------------------- the timer


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_CLOCK_MONOTONIC = 1  # the clock of time.monotonic() on Linux
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class TimerFd:
    """A one-shot timer on ``CLOCK_MONOTONIC`` with nanosecond resolution, as a file descriptor
    that becomes readable when it fires (``timerfd_create(2)``; the stdlib has it only from
    Python 3.13, hence ctypes)."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._libc.timerfd_settime.argtypes = [
            ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p,
        ]  # fmt: skip
        fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd: int = fd
        self._spec = _Itimerspec()

    def arm(self, at: float) -> None:
        """Fire at ``at`` (``time.monotonic()`` seconds; a time past fires at once)."""
        ns = max(1, int(at * 1e9))  # (0 would disarm it)
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = divmod(ns, 1_000_000_000)
        if self._libc.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None):
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def consume(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)

    def close(self) -> None:
        os.close(self.fd)


class Clock:
    """The links' shared timer: a heap of (due, link) and one armed ``timerfd``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._timer = TimerFd()
        self._heap: list[tuple[float, int, Link]] = []
        self._seq = itertools.count()
        self._armed = float("inf")
        self._closed = False
        loop.add_reader(self._timer.fd, self._fire)

    def at(self, due: float, link: Link) -> None:
        if self._closed:
            return  # (a socket closing after the proxy stopped)
        heapq.heappush(self._heap, (due, next(self._seq), link))
        if due < self._armed:
            self._armed = due
            self._timer.arm(due)

    def _fire(self) -> None:
        self._timer.consume()
        self._armed = float("inf")
        now = time.monotonic()
        heap = self._heap
        while heap and heap[0][0] <= now:
            link = heapq.heappop(heap)[2]
            link.flush(now)
        if heap:
            self._armed = heap[0][0]
            self._timer.arm(self._armed)

    def close(self) -> None:
        self._closed = True
        self._heap.clear()
        self._loop.remove_reader(self._timer.fd)
        self._timer.close()


# --------------------------------------------------------------------------- one direction


class Link:
    """One direction of one connection: bytes read from ``source``, written to ``sink`` after
    ``delay_s``, in order."""

    def __init__(self, clock: Clock, delay_s: float, source: Side, sink: Side) -> None:
        self._clock = clock
        self._delay_s = delay_s
        self._queue: deque[tuple[float, bytes]] = deque()
        self._queued_bytes = 0
        self._source = source
        self._sink = sink
        self._sink_full = False
        self.ended = False  # its end of stream was passed on
        self.bytes = 0

    def push(self, chunk: bytes) -> None:
        """A chunk read from the source (``_EOF``: its end of stream)."""
        self.bytes += len(chunk)
        if not self._delay_s and not self._queue:
            self._write(chunk)
            return
        due = time.monotonic() + self._delay_s
        if not self._queue:
            self._clock.at(due, self)
        self._queue.append((due, chunk))
        self._queued_bytes += len(chunk)
        if self._queued_bytes > MAX_QUEUED_BYTES:
            self._source.hold(True)

    def flush(self, now: float) -> None:
        """Write every chunk due by ``now``; ask the clock for the next one."""
        queue = self._queue
        parts: list[bytes] = []
        while queue and queue[0][0] <= now:
            chunk = queue.popleft()[1]
            if not chunk:  # (_EOF)
                self._write(b"".join(parts))
                parts = []
                self._write(_EOF)
            else:
                parts.append(chunk)
                self._queued_bytes -= len(chunk)
        if parts:
            self._write(b"".join(parts))
        if queue:
            self._clock.at(queue[0][0], self)
        if self._queued_bytes < RESUME_BELOW_BYTES:
            self._source.hold(self._sink_full)

    def _write(self, chunk: bytes) -> None:
        if chunk:
            self._sink.send(chunk)
        elif not self.ended:
            self.ended = True
            self._sink.end()

    def sink_full(self, full: bool) -> None:
        """The sink's socket buffer filled up (or drained): stop (resume) reading the source."""
        self._sink_full = full
        self._source.hold(full or self._queued_bytes > MAX_QUEUED_BYTES)

    def drop(self) -> None:
        self._queue.clear()
        self._queued_bytes = 0


# --------------------------------------------------------------------------- one connection


class Side(asyncio.Protocol):
    """One socket of a proxied connection (the client's or the backend's)."""

    def __init__(self, proxy: DelayProxy) -> None:
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        self.peer: Side | None = None
        self.outgoing: Link | None = None  # what this side reads, on its way to the peer
        self.incoming: Link | None = None  # what the peer read, on its way here
        self.closed = False
        self.early: list[bytes] = []  # read before the link existed
        self._held = False

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # (uvloop's: no subclass)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.proxy.track(self)

    def data_received(self, data: bytes) -> None:
        if self.outgoing is not None:
            self.outgoing.push(data)
        else:  # read before the other side connected (uvloop reads right after connecting)
            self.early.append(data)
            self.hold(True)

    def eof_received(self) -> bool:
        if self.outgoing is not None:
            self.outgoing.push(_EOF)
        else:
            self.early.append(_EOF)
        return True  # half-closed: the other direction may still carry bytes

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.proxy.forget(self)
        peer = self.peer
        if peer is None or peer.closed:
            return
        if exc is not None:  # a reset: the peer learns it at once, queued bytes are dropped
            if self.outgoing is not None:
                self.outgoing.drop()
            peer.abort()
        elif self.outgoing is not None and not self.outgoing.ended:
            self.outgoing.push(_EOF)  # (closed without a FIN read first: the peer ends after)

    def pause_writing(self) -> None:
        if self.incoming is not None:
            self.incoming.sink_full(True)

    def resume_writing(self) -> None:
        if self.incoming is not None:
            self.incoming.sink_full(False)

    # ---- called by the links

    def send(self, chunk: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(chunk)

    def end(self) -> None:
        """The peer's end of stream is due here: half-close this side, or close both once both
        directions have ended (or the peer is gone: nothing more can come from it)."""
        peer = self.peer
        if self.transport is None or self.closed:
            if peer is not None:
                peer.close()
            return
        both = self.outgoing is not None and self.outgoing.ended
        if both or peer is None or peer.closed or not self.transport.can_write_eof():
            self.close()
            if peer is not None:
                peer.close()
        else:
            self.transport.write_eof()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()  # (what is still buffered is written first)

    def hold(self, held: bool) -> None:
        """Pause (or resume) reading this side."""
        if held == self._held or self.transport is None or self.closed:
            return
        self._held = held
        if held:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()


class ClientSide(Side):
    """The accepted socket: its backend connection is made first."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.proxy.spawn(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.proxy.backend
        try:
            _, backend = await loop.create_connection(lambda: Side(self.proxy), host, port)
        except OSError as e:
            log.warning("backend %s:%d refused a connection: %s", host, port, e)
            self.abort()
            return
        if self.closed:
            backend.abort()
            return
        self.proxy.pair(self, backend)


# --------------------------------------------------------------------------- the proxy


class DelayProxy:
    """Listens on ``host:port`` (0: a free port) and relays to ``backend`` with ``rtt_s / 2``
    added each way. ``async with DelayProxy.running(...) as proxy``; ``proxy.port``."""

    def __init__(self, backend: tuple[str, int], rtt_s: float) -> None:
        if rtt_s < 0:
            raise ValueError("the round-trip time must be 0 or more")
        self.backend = backend
        self.one_way_s = rtt_s / 2
        self.port = 0
        self.connections = 0
        self._sides: set[Side] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.AbstractServer | None = None
        self._clock: Clock | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls, backend: tuple[str, int], rtt_s: float, host: str = "127.0.0.1", port: int = 0
    ) -> AsyncIterator[DelayProxy]:
        proxy = cls(backend, rtt_s)
        await proxy.start(host, port)
        try:
            yield proxy
        finally:
            await proxy.aclose()

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._clock = Clock(loop)
        self._server = await loop.create_server(lambda: ClientSide(self), host, port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    def pair(self, client: Side, backend: Side) -> None:
        assert self._clock is not None
        self.connections += 1
        client.peer, backend.peer = backend, client
        client.outgoing = backend.incoming = Link(self._clock, self.one_way_s, client, backend)
        backend.outgoing = client.incoming = Link(self._clock, self.one_way_s, backend, client)
        for side in (client, backend):
            assert side.outgoing is not None
            for chunk in side.early:
                side.outgoing.push(chunk)
            side.early.clear()
            side.hold(False)

    def open_sockets(self) -> int:
        """Sockets of either side not closed yet."""
        return len(self._sides)

    def track(self, side: Side) -> None:
        self._sides.add(side)

    def forget(self, side: Side) -> None:
        self._sides.discard(side)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for side in list(self._sides):
            side.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self._clock is not None:
            self._clock.close()
            self._clock = None


# --------------------------------------------------------------------------- as a process


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def _rtt_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds, got {text!r}") from None
    if not 0 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"--rtt-ms must be between 0 and 10000, got {text}")
    return value


async def _serve(listen: tuple[str, int], backend: tuple[str, int], rtt_ms: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with DelayProxy.running(backend, rtt_ms / 1000, *listen) as proxy:
        print(f"listening on {listen[0]}:{proxy.port}, rtt {rtt_ms} ms", flush=True)
        await stop.wait()
        print(f"stopped after {proxy.connections} connections", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m emq.rigs.netdelay",
        description="A TCP proxy adding rtt/2 each way (a network hop in front of a server).",
    )
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT to accept on")
    parser.add_argument("--to", type=_address, required=True, help="HOST:PORT to relay to")
    parser.add_argument("--rtt-ms", type=_rtt_ms, default=0.0, help="round-trip delay (0)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    import uvloop

    uvloop.run(_serve(args.listen, args.to, args.rtt_ms))


# --------------------------------------------------------------------------- for the benches


class DelayProcess:
    """``python -m emq.rigs.netdelay`` as a child process on ``port`` (the benchmarks' network
    hop): :meth:`start` waits until it accepts, :meth:`stop` ends it; ``pid`` for its CPU, and
    once stopped, ``connections``: how many it relayed (None if it did not say)."""

    def __init__(self, port: int, backend: tuple[str, int], rtt_ms: float, log_path: Path) -> None:
        from emq.rigs.procs import Proc

        self.port = port
        self.rtt_ms = rtt_ms
        argv = ["--listen", f"127.0.0.1:{port}", "--to", f"{backend[0]}:{backend[1]}"]
        argv += ["--rtt-ms", repr(rtt_ms)]
        self.proc = Proc("netdelay", argv, None, log_path, module=__name__, start=False)
        self.connections: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def start(self, timeout_s: float = 20.0) -> None:
        self.proc.start()
        with contextlib.suppress(OSError):  # ahead of the processes it carries, as a wire is
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, -10)
        deadline = time.monotonic() + timeout_s
        while "listening on" not in self.proc.log(400):
            self.proc.check()
            if time.monotonic() > deadline:
                self.proc.stop(5)
                raise TimeoutError(f"netdelay did not listen within {timeout_s:.0f} s")
            await asyncio.sleep(0.02)

    def stop(self) -> None:
        self.proc.stop(10)
        said = re.search(r"stopped after (\d+) connections", self.proc.log(400))
        self.connections = int(said[1]) if said else None

    def redis_url(self, db: int = 0) -> str:
        """The URL of the Redis behind it, reached through it."""
        return f"redis://127.0.0.1:{self.port}/{db}"


@contextlib.asynccontextmanager
async def redis_hop(redis_port: int, rtt_ms: float, log_dir: Path) -> AsyncIterator[DelayProcess]:
    """A :class:`DelayProcess` on a free port in front of the Redis on loopback ``redis_port``,
    running for the block (its log ``netdelay-<rtt>.log`` in ``log_dir``)."""
    from emq.stack import free_port

    hop = DelayProcess(
        free_port(), ("127.0.0.1", redis_port), rtt_ms, log_dir / f"netdelay-{rtt_ms:g}.log"
    )
    await hop.start()
    try:
        yield hop
    finally:
        hop.stop()


if __name__ == "__main__":
    main(sys.argv[1:])

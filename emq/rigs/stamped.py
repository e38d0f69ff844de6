"""A listener whose connections tell each read's arrival time as the kernel stamped it.

The sink judges pacing from when requests arrive (any 1000 ms window, every wall-clock second).
Stamped in user space, an arrival is late by however long the sink's own process waited for the
CPU: on a busy two-core machine a sink that stalls 20 ms stamps the requests of those 20 ms
together, and a window starting there holds them and the next second's, over a quota the worker
kept. The kernel stamps each packet as it is received (``SO_TIMESTAMPNS``, the wall clock:
``time.time()``'s); a read returns the stamp of its last packet, the end of the request for a
client that waits for each answer before the next request (the workers, the bench clients).

Used instead of ``loop.create_server`` by the sink (:mod:`emq.rigs.sink`) where arrival times are
judged: a small transport of its own, because asyncio's reads (``recv``) drop the ancillary data
that carries the stamp. It offers what :class:`~emq.rigs.sink.SinkProtocol` uses of a transport
(``write``, ``close``, ``is_closing``, ``get_extra_info``) and calls the protocol's
``received(data, stamp)``. Where the option is missing (not Linux) the stamp is ``time.time()``
at the read.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

# SO_TIMESTAMPNS (and the control message's type, SCM_TIMESTAMPNS): Linux's value; the
# socket module does not name it. The payload is a struct timespec (two longs).
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@ll")
_CMSG_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)
READ_SIZE = 256 * 1024


class Stamped(Protocol):
    """What the listener drives (``SinkProtocol``)."""

    def connection_made(self, transport: Any) -> None: ...
    def received(self, data: bytes, stamp: float) -> None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...


class StampedTransport:
    """One accepted connection (see the module docstring); not an ``asyncio.Transport``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: Stamped,
        connections: set[StampedTransport],
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._protocol = protocol
        self._connections = connections
        self._fd = sock.fileno()
        self._out = bytearray()
        self._closing = False
        self._peer = sock.getpeername()
        self._stamped = _stamp_option(sock)

    def start(self) -> None:
        self._connections.add(self)
        self._protocol.connection_made(self)
        self._loop.add_reader(self._fd, self._read)

    def abort(self) -> None:
        """Drop the connection at once (what is not sent yet is lost)."""
        self._lose(None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"socket": self._sock, "peername": self._peer}.get(name, default)

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        if not self._out:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as e:
                self._lose(e)
                return
            if sent == len(data):
                return
            data = data[sent:]
            self._loop.add_writer(self._fd, self._flush)
        self._out += data

    def close(self) -> None:
        """Close once what is written is sent (at once when nothing waits)."""
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        if not self._out:
            self._lose(None)

    def _flush(self) -> None:
        try:
            sent = self._sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lose(e)
            return
        del self._out[:sent]
        if not self._out:
            self._loop.remove_writer(self._fd)
            if self._closing:
                self._lose(None)

    def _read(self) -> None:
        try:
            data, ancillary, _, _ = self._sock.recvmsg(READ_SIZE, _CMSG_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lose(e)
            return
        if not data:
            self._lose(None)  # the peer closed
            return
        self._protocol.received(data, _stamp_of(ancillary) if self._stamped else time.time())

    def _lose(self, exc: Exception | None) -> None:
        if self._fd < 0:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        self._fd = -1
        self._out.clear()
        self._connections.discard(self)
        self._sock.close()
        self._protocol.connection_lost(exc)


class StampedServer:
    """Listens on ``host:port`` and starts a :class:`StampedTransport` per connection."""

    def __init__(self, factory: Callable[[], Stamped], sock: socket.socket) -> None:
        self._factory = factory
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._connections: set[StampedTransport] = set()
        self.sockets = [sock]
        self._loop.add_reader(sock.fileno(), self._accept)

    @classmethod
    async def listen(
        cls, factory: Callable[[], Stamped], host: str, port: int, backlog: int = 4096
    ) -> StampedServer:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Asked here, before anyone connects, not only on each accepted socket: the kernel
        # stamps packets only while some socket asks for stamps (and turns that on a moment
        # after the first asks), so a request that came before its connection was accepted
        # had no stamp and took the read's time, a stall late (a worker's first requests all
        # go on new connections). Accepted sockets inherit the option.
        _stamp_option(sock)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
        return cls(factory, sock)

    def _accept(self) -> None:
        for _ in range(64):  # (a burst of connects: the rest on the next turn)
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors, a connection reset while queued
                return
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            StampedTransport(self._loop, conn, self._factory(), self._connections).start()

    def close(self) -> None:
        """Stop listening and drop every connection (held requests included)."""
        if self._sock.fileno() >= 0:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
        for transport in list(self._connections):
            transport.abort()

    async def wait_closed(self) -> None:
        await asyncio.sleep(0)


def _stamp_option(sock: socket.socket) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        return True
    return False


def _stamp_of(ancillary: list[tuple[int, int, bytes]]) -> float:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            return float(seconds + nanoseconds * 1e-9)
    return time.time()  # (a read without the stamp: none was asked, or the option is off)

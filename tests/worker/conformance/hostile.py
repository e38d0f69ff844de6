"""A hostile HTTP endpoint on loopback: a raw asyncio socket server whose every answer is
scripted per connection and request, and that keeps the truth of what it answered.

Each request carries its job in ``X-Job`` (or, from a worker, ``webhook-id``). The script gets
(connection number, request number on that connection, path) and returns a :class:`Reply`:
steps written in turn (bytes, pauses, a reset, a close, a hang, a trickle, a stream) and
whether the request was answered with a complete 2xx (``ok``: the truth a client's "delivered"
is judged by). A step marked :class:`Stray` is written after a complete response: the
connection must never carry another request; one that does is recorded in
:attr:`Hostile.reused_after_stray`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Stray:
    """Bytes written after a complete response (the connection is unusable from here), in one
    write with ``answer`` (the complete response they follow), if given: one read."""

    data: bytes
    answer: bytes = b""


@dataclass(frozen=True)
class Pause:
    seconds: float


@dataclass(frozen=True)
class Trickle:
    """``data`` a byte at a time, ``every_s`` apart (stops when the client has gone)."""

    data: bytes
    every_s: float


@dataclass(frozen=True)
class Stream:
    """``chunk`` written again and again (with backpressure) until ``total`` bytes or the client
    has gone: an endless header, a huge body."""

    chunk: bytes
    total: int


class Reset:
    """Close with an RST (SO_LINGER 0)."""


class Close:
    """Close cleanly (FIN)."""


class Hang:
    """Write nothing more, keep the connection open."""


RESET, CLOSE, HANG = Reset(), Close(), Hang()
Step = bytes | Stray | Pause | Trickle | Stream | Reset | Close | Hang


@dataclass
class Reply:
    steps: list[Step]
    ok: bool  # the request was answered with a complete 2xx


@dataclass
class Seen:
    job: str
    conn: int
    index: int  # its request number on its connection
    ok: bool


Script = Callable[[int, int, str], Reply]  # (connection, request on it, path)


@dataclass
class Hostile:
    script: Script
    seen: list[Seen] = field(default_factory=list)
    strayed: set[int] = field(default_factory=set)
    reused_after_stray: list[int] = field(default_factory=list)
    connections: int = 0
    port: int = 0
    playing: int = 0  # replies being written now

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def settled(self, timeout_s: float = 2.0) -> None:
        """Wait until every reply begun has been written (late stray bytes included), then a
        little more for the client's loop to read them."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.playing and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.02)

    def truth(self, job: str) -> bool:
        """Whether ``job``'s request was answered with a complete 2xx (False: never seen)."""
        return any(s.ok for s in self.seen if s.job == job)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Hostile]:
        tasks: set[asyncio.Task[None]] = set()

        def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.ensure_future(self._serve(reader, writer))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        server = await asyncio.start_server(accepted, "127.0.0.1", 0, limit=1 << 20)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            server.close()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = self.connections
        self.connections += 1
        try:
            for index in range(1_000_000):
                request = await _read_request(reader)
                if request is None:
                    return
                job, path = request
                if conn in self.strayed:
                    self.reused_after_stray.append(conn)
                reply = self.script(conn, index, path)
                self.seen.append(Seen(job, conn, index, reply.ok))
                self.playing += 1
                try:
                    if not await self._play(conn, reply.steps, writer):
                        return
                finally:
                    self.playing -= 1
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.transport.abort()

    async def _play(self, conn: int, steps: list[Step], writer: asyncio.StreamWriter) -> bool:
        """Write the steps; False: the connection is done."""
        for step in steps:
            if isinstance(step, bytes):
                writer.write(step)
            elif isinstance(step, Stray):
                self.strayed.add(conn)
                writer.write(step.answer + step.data)
            elif isinstance(step, Pause):
                await writer.drain()
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Trickle):
                for byte in step.data:
                    if writer.transport.is_closing():
                        return False
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(step.every_s)
            elif isinstance(step, Stream):
                sent = 0
                while sent < step.total:
                    writer.write(step.chunk)
                    sent += len(step.chunk)
                    await writer.drain()  # (raises once the client has gone)
            elif isinstance(step, Reset):
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return False
            elif isinstance(step, Close):
                await writer.drain()
                writer.close()
                return False
            else:  # Hang
                await asyncio.Event().wait()
        await writer.drain()
        return True


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str] | None:
    """One request's job id and path (its body read and dropped); None: the client closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    job, length = "", 0
    lines = head.split(b"\r\n")
    path = lines[0].split(b" ")[1].decode()
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name in (b"x-job", b"webhook-id"):  # (a worker's request: its job's id)
            job = value.strip().decode()
        elif name == b"content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return job, path


@contextlib.contextmanager
def never_accepting() -> Iterator[socket.socket]:
    """A listening socket whose accept queue is full and never drained: a connect to its port
    gets no answer (yields the socket; connect to its port)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):  # the queue (backlog 0: one) and then some, all left unaccepted
            s = socket.socket()
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                s.connect(("127.0.0.1", port))
            fillers.append(s)
        yield listener
    finally:
        for s in fillers:
            s.close()
        listener.close()

"""A minimal HTTP/1.1 sink for the dispatch benchmarks, run as its own process.

    python -m emq.bench.sink --port P [--record]

An ``asyncio.Protocol`` (on uvloop) that parses just enough of each request (request line,
headers, a ``Content-Length`` body) and answers ``200`` with an empty body, keeping the
connection alive, so that one core serves far more requests than one worker sends: the figures
then measure the sender, not the sink. Paths:

* ``/t/<topic>``: counted per topic per wall-clock second (arrival time). A request carrying
  ``X-Bench-Sent`` (epoch seconds, set when the job was enqueued) also records its latency.
* ``/hang/<anything>``: never answered; the connection stays open until the client gives up.
* ``/slow/<ms>/<topic>``: answered ``200`` after ``ms`` milliseconds, then counted per topic per
  wall-clock second like ``/t/`` (but not in ``requests``, ``first_at`` or ``last_at``).
* ``/fail/<n>/<topic>``: ``500`` to the first ``n`` requests of each ``webhook-id``, then ``200``
  (a flaky endpoint: the job succeeds on its ``n + 1``-th attempt).
* ``/busy/<n>/<topic>``: ``503`` with ``Retry-After: 1`` to the first ``n`` requests of each
  ``webhook-id``, then ``200`` (an endpoint shedding load).
* ``GET /_stats``: the counts as JSON; ``GET /_reset``: clears them.

With ``--record`` the sink also keeps a delivery log for the promise checker
(:mod:`emq.bench.promises`): one row per request to ``/t/``, ``/slow/``, ``/hang/``, ``/fail/``
or ``/busy/`` of ``[arrival wall time, topic, webhook-id, status answered (0: never), query
string]``, read with ``GET /_log?from=N`` (rows ``N`` onwards, and ``next``, the ``from`` of
the following call).
Off by default: the dispatch benchmarks measure the sender, and the log costs the sink a little.

Chunked request bodies are not supported (neither the worker nor the benchmark client sends
one): a request without ``Content-Length`` has no body.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import time
from collections import defaultdict
from typing import Any

import uvloop

from worker.main import raise_fd_limit

_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
_FAILED = {
    b"fail": (500, b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"),
    b"busy": (
        503,
        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n",
    ),
}
_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 64 * 1024


class Stats:
    """What the sink saw since the last reset."""

    def __init__(self, record: bool = False) -> None:
        self.record = record
        self.reset()

    def reset(self) -> None:
        self.started = time.time()
        self.per_second: defaultdict[str, defaultdict[int, int]] = defaultdict(
            lambda: defaultdict(int)
        )
        self.latencies: defaultdict[str, list[float]] = defaultdict(list)
        self.requests = 0
        self.first_at = 0.0  # arrival of the first and the last counted request
        self.last_at = 0.0
        self.hung = 0
        self.slow = 0  # slow requests answered
        self.other = 0
        self.log: list[tuple[float, str, str, int, str]] = []
        self.attempts: defaultdict[bytes, int] = defaultdict(int)  # /fail/, /busy/: per id

    def note(self, head: bytes, now: float, topic_path: bytes, status: int) -> None:
        """Append a delivery log row (when recording) for a request to ``topic_path``."""
        if not self.record:
            return
        topic, _, query = topic_path.partition(b"?")
        webhook_id = _header(head, b"\r\nwebhook-id:") or b""
        self.log.append((now, topic.decode(), webhook_id.decode(), status, query.decode()))

    def log_from(self, start: int) -> dict[str, Any]:
        rows = self.log[start:]
        return {"next": start + len(rows), "log": rows}

    def to_dict(self) -> dict[str, Any]:
        return {
            "since": self.started,
            "now": time.time(),
            "requests": self.requests,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "hung": self.hung,
            "slow": self.slow,
            "other": self.other,
            "per_second": {
                topic: {str(s): n for s, n in seconds.items()}
                for topic, seconds in self.per_second.items()
            },
            "latency_ms": {
                topic: [round(v * 1000, 3) for v in values]
                for topic, values in self.latencies.items()
            },
        }


class SinkProtocol(asyncio.Protocol):
    __slots__ = ("_buffer", "_hung", "_need", "_stats", "_transport")

    def __init__(self, stats: Stats) -> None:
        self._stats = stats
        self._buffer = bytearray()
        self._need = -1  # bytes of the current request (head + body) once its head is parsed
        self._hung = False
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self._hung:
            return  # a hung request: whatever else the client sends is ignored
        buffer = self._buffer
        buffer += data
        while buffer:
            end = buffer.find(_HEAD_END)
            if end < 0:
                if len(buffer) > _MAX_HEAD:
                    self._close()
                return
            head = bytes(buffer[:end])
            total = end + 4 + _content_length(head)
            if len(buffer) < total:
                return
            del buffer[:total]
            if not self._handle(head):
                return

    def _handle(self, head: bytes) -> bool:
        """Answer one request; False when nothing more is to be read from this connection."""
        line_end = head.find(b"\r\n")
        request_line = head if line_end < 0 else head[:line_end]
        parts = request_line.split(b" ")
        path = parts[1] if len(parts) >= 2 else b"/"
        stats = self._stats
        now = time.time()
        transport = self._transport
        assert transport is not None
        if path.startswith(b"/t/"):
            topic = path[3:].split(b"?", 1)[0].decode()
            if not stats.requests:
                stats.first_at = now
            stats.requests += 1
            stats.last_at = now
            stats.per_second[topic][int(now)] += 1
            sent = _header(head, b"\r\nx-bench-sent:")
            if sent is not None:
                stats.latencies[topic].append(now - float(sent))
            stats.note(head, now, path[3:], 200)
            transport.write(_OK)
        elif path.startswith(b"/slow/"):
            ms, _, topic = path[6:].split(b"?", 1)[0].partition(b"/")
            stats.note(head, now, path[6:].partition(b"/")[2], 200)
            asyncio.get_running_loop().call_later(int(ms) / 1000, self._slow, topic.decode())
        elif path.startswith((b"/fail/", b"/busy/")):
            self._flaky(head, now, path)
        elif path.startswith(b"/hang/"):
            stats.hung += 1
            stats.note(head, now, path[6:], 0)
            self._hung = True
            return False
        elif path.startswith(b"/_log"):
            start = path.partition(b"from=")[2]
            self._json(stats.log_from(int(start) if start.isdigit() else 0))
        elif path.startswith(b"/_stats"):
            self._json(stats.to_dict())
        elif path.startswith(b"/_reset"):
            stats.reset()
            self._json({"reset": True})
        else:
            stats.other += 1
            transport.write(_OK)
        return True

    def _flaky(self, head: bytes, now: float, path: bytes) -> None:
        """``/fail/<n>/<topic>`` or ``/busy/<n>/<topic>``: fail an id's first ``n`` requests."""
        kind, count, rest = path[1:].split(b"/", 2)
        webhook_id = _header(head, b"\r\nwebhook-id:") or b""
        attempts = self._stats.attempts
        attempts[webhook_id] += 1
        status, answer = (200, _OK)
        if attempts[webhook_id] <= (int(count) if count.isdigit() else 0):
            status, answer = _FAILED[kind]
        self._stats.note(head, now, rest, status)
        assert self._transport is not None
        self._transport.write(answer)

    def _slow(self, topic: str) -> None:
        if self._transport is None or self._transport.is_closing():
            return  # the client gave up first
        stats = self._stats
        stats.slow += 1
        stats.per_second[topic][int(time.time())] += 1
        self._transport.write(_OK)

    def _json(self, value: Any) -> None:
        body = json.dumps(value, separators=(",", ":")).encode()
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % len(body)
        )
        assert self._transport is not None
        self._transport.write(head + body)

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None


def _header(head: bytes, name: bytes) -> bytes | None:
    """The value of header ``name`` (given lower-case as ``b"\\r\\nname:"``), or None."""
    at = head.lower().find(name)
    if at < 0:
        return None
    start = at + len(name)
    end = head.find(b"\r\n", start)
    return (head[start:] if end < 0 else head[start:end]).strip()


def _content_length(head: bytes) -> int:
    value = _header(head, b"\r\ncontent-length:")
    return int(value) if value else 0


async def serve(host: str, port: int, record: bool = False) -> None:
    loop = asyncio.get_running_loop()
    stats = Stats(record)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await loop.create_server(
        lambda: SinkProtocol(stats), host, port, backlog=4096, reuse_address=True
    )
    print(f"sink listening on {host}:{port}", flush=True)
    await stop.wait()
    server.close()  # hung connections are not waited for: the process ends


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m emq.bench.sink", description=__doc__)
    p.add_argument("--host", default="127.0.0.1", help="listen address (loopback)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--record", action="store_true", help="keep a per-request delivery log")
    a = p.parse_args()
    raise_fd_limit(0)  # W6b holds thousands of connections open
    uvloop.run(serve(a.host, a.port, a.record))


if __name__ == "__main__":
    main()

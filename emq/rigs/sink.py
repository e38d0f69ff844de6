"""The one HTTP sink of EMQ's tests, benchmarks and demo: where the workers' pushes land.

An ``asyncio.Protocol`` that parses just enough of each request (request line, headers, a
``Content-Length`` body) and answers without a web framework, keeping the connection alive, so
one core serves far more requests than one worker sends: benchmark figures then measure the
sender, not the sink. It runs two ways:

* as its own process, for the benchmarks (``python -m emq.rigs.sink --port P [--record]``;
  :class:`emq.rigs.procs.SinkProcess` starts one and reads it over HTTP), steered by the path;
* on the caller's event loop, for the tests and ``emq demo`` (:class:`Sink`: ``async with
  Sink().serving() as sink``), which also records each delivery (topic, job id, time, headers,
  body) and answers each topic as its :class:`Behaviour` says (a status, a ``Retry-After``, a
  delay, a hang, failures first).

Paths:

* ``/t/<topic>``: counted per topic per wall-clock second. A request carrying the latency
  header (``X-Bench-Sent``: epoch seconds, set when the job was enqueued) also records its
  latency. In a :class:`Sink`, answered as the topic's behaviour says (by default ``200`` at
  once) and counted when answered.
* ``/logged/<topic>``: a receiver that does some work per request: parses the JSON body and logs
  a line for it (the ``emq.rigs.sink.requests`` logger: the process's output, its log file), then
  answers ``200`` (``400`` to a body that is not JSON) and is counted like ``/t/`` (W8).
* ``/body/<n>/<topic>``: like ``/t/``, answered ``200`` with ``n`` bytes of body (the attempt
  log's excerpts: ``BENCH_EXCERPT_BYTES``, :mod:`emq.bench.workloads`).
* ``/hang/<anything>``: never answered; the connection stays open until the client gives up.
* ``/slow/<ms>/<topic>``: answered ``200`` after ``ms`` milliseconds, then counted per topic per
  wall-clock second like ``/t/`` (but not in ``requests``, ``first_at`` or ``last_at``).
* ``/fail/<n>/<topic>``: ``500`` to the first ``n`` requests of each ``webhook-id``, then ``200``
  (a flaky endpoint: the job succeeds on its ``n + 1``-th attempt).
* ``/busy/<n>/<topic>``: ``503`` with ``Retry-After: 1`` to the first ``n`` requests of each
  ``webhook-id``, then ``200`` (an endpoint shedding load).
* ``/limit/<n>/<topic>``: ``200`` while fewer than ``n`` requests to ``<topic>`` were answered
  ``200`` in the last second (a sliding window), else ``429`` without ``Retry-After`` (an endpoint
  with a rate limit; with the query ``ra=1``, with ``Retry-After: 1``); the ``200`` s are counted
  per topic per wall-clock second like ``/t/``, the ``429`` s in ``throttled``.
* ``GET /_stats``: the counts as JSON; ``GET /_reset``: clears them.

With ``record`` the sink also keeps a delivery log for the promise checker
(:mod:`emq.bench.promises`): one row per request to ``/t/``, ``/slow/``, ``/hang/``, ``/fail/``,
``/busy/`` or ``/limit/`` of ``[arrival wall time, topic, webhook-id, status answered (0: never),
query string]``, read with ``GET /_log?from=N`` (rows ``N`` onwards, and ``next``, the ``from`` of
the following call).
Off by default: the dispatch benchmarks measure the sender, and the log costs the sink a little.

Where arrival times are judged (the in-loop :class:`Sink`, the process with ``--record``) a
request's time is when the kernel received it (:mod:`emq.rigs.stamped`), not when this process
got to it: a sink that waits for the CPU would otherwise bunch a stall's arrivals into one
window. Without ``--record`` the process serves on uvloop's transports (the throughput
benchmarks: the sink must outrun the worker) and stamps at the read.

Chunked request bodies are not supported (neither the worker nor the benchmark client sends
one): a request without ``Content-Length`` has no body.

This module is the HTTP side (parsing, the path-steered answers, the process); what is counted
and logged is :mod:`emq.rigs.sink_stats`; the in-loop :class:`Sink` with its behaviours and
recorded deliveries is :mod:`emq.rigs.sink_recorder` (both re-exported here).
"""

from __future__ import annotations

import argparse
import asyncio
import http
import json
import logging
import signal
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any

import uvloop

from emq.rigs.sink_recorder import Behaviour, Delivery, Sink
from emq.rigs.sink_stats import Stats
from emq.rigs.sink_stats import find_header as _header
from emq.rigs.stamped import StampedServer, StampedTransport
from worker.main import raise_fd_limit

__all__ = ["Behaviour", "Delivery", "Sink", "SinkProtocol", "Stats", "main", "serve"]

_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
_BAD = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
requests_log = logging.getLogger("emq.rigs.sink.requests")
_TOO_MANY = b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n\r\n"
_TOO_MANY_RA = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n"
_FAILED = {
    b"fail": (500, b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"),
    b"busy": (
        503,
        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n",
    ),
}
_STATUSES = {s.value for s in http.HTTPStatus}
_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 64 * 1024


class SinkProtocol(asyncio.Protocol):
    __slots__ = ("_buffer", "_hung", "_need", "_sink", "_stats", "_transport")

    def __init__(self, stats: Stats, sink: Sink | None = None) -> None:
        self._stats = stats
        self._sink = sink
        self._buffer = bytearray()
        self._need = -1  # bytes of the current request (head + body) once its head is parsed
        self._hung = False
        self._transport: asyncio.Transport | StampedTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport | StampedTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @property
    def peer(self) -> tuple[str, int] | None:
        """The client's (address, port), while connected."""
        if self._transport is None:
            return None
        peer = self._transport.get_extra_info("peername")
        return (peer[0], peer[1]) if peer else None

    @property
    def open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def data_received(self, data: bytes) -> None:
        self.received(data, time.time())

    def received(self, data: bytes, now: float) -> None:
        """Bytes read, ``now`` their arrival (the kernel's stamp: :mod:`emq.rigs.stamped`)."""
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
            body = bytes(buffer[end + 4 : total])
            del buffer[:total]
            if not self._handle(head, body, now):
                return

    def _handle(self, head: bytes, body: bytes, now: float) -> bool:
        """Answer one request; False when nothing more is to be read from this connection."""
        line_end = head.find(b"\r\n")
        request_line = head if line_end < 0 else head[:line_end]
        parts = request_line.split(b" ")
        path = parts[1] if len(parts) >= 2 else b"/"
        stats = self._stats
        transport = self._transport
        assert transport is not None
        if path.startswith(b"/t/") and self._sink is not None:
            topic = path[3:].split(b"?", 1)[0].decode()
            self._sink.arrived(self, topic, head, body, now)
            return not self._hung
        if path.startswith(b"/t/"):
            self._count(head, now, path[3:])
            transport.write(_OK)
        elif path.startswith(b"/body/"):  # /body/<n>/<topic>: 200 with n bytes of body
            size, _, rest = path[6:].partition(b"/")
            self._count(head, now, rest)
            n = int(size) if size.isdigit() else 0
            transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n + b"x" * n)
        elif path.startswith(b"/logged/"):
            if self._logged(head, body, path[8:]):
                self._count(head, now, path[8:])
                transport.write(_OK)
            else:
                stats.other += 1
                transport.write(_BAD)
        elif path.startswith(b"/slow/"):
            ms, _, slow = path[6:].split(b"?", 1)[0].partition(b"/")
            stats.note(head, now, path[6:].partition(b"/")[2], 200)
            asyncio.get_running_loop().call_later(int(ms) / 1000, self._slow, slow.decode())
        elif path.startswith(b"/limit/"):
            self._limit(head, now, path)
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

    def _count(self, head: bytes, now: float, topic_path: bytes) -> None:
        """Count one answered request to ``topic_path`` (``<topic>[?query]``)."""
        stats = self._stats
        topic = topic_path.split(b"?", 1)[0].decode()
        if not stats.requests:
            stats.first_at = now
        stats.requests += 1
        stats.last_at = now
        stats.per_second[topic][int(now)] += 1
        sent = _header(head, stats.latency_header)
        if sent is not None:
            stats.latencies[topic].append(now - float(sent))
        stats.note(head, now, topic_path, 200)

    @staticmethod
    def _logged(head: bytes, body: bytes, topic_path: bytes) -> bool:
        """``/logged/<topic>``: parse the body and log a line for it; False if it is no JSON."""
        try:
            doc = json.loads(body)
        except ValueError:
            return False
        webhook_id = (_header(head, b"\r\nwebhook-id:") or b"").decode()
        fields = len(doc) if isinstance(doc, dict) else 0
        requests_log.info(
            "%s %s: %d bytes, %d fields", topic_path.decode(), webhook_id, len(body), fields
        )
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

    def _limit(self, head: bytes, now: float, path: bytes) -> None:
        """``/limit/<n>/<topic>``: 429 once ``n`` were answered 200 in the last second."""
        count, _, rest = path[7:].partition(b"/")
        topic = rest.split(b"?", 1)[0].decode()
        stats = self._stats
        window = stats.windows[topic]
        while window and window[0] <= now - 1.0:
            window.popleft()
        if len(window) < (int(count) if count.isdigit() else 0):
            window.append(now)
            stats.per_second[topic][int(now)] += 1
            status, answer = 200, _OK
        else:
            stats.throttled[topic] += 1
            status, answer = 429, _TOO_MANY_RA if b"ra=1" in rest else _TOO_MANY
        stats.note(head, now, rest, status)
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
        if self._hung and self._sink is not None:
            self._sink.gave_up(self)

    # ------------------------------------------------------------------ for Sink

    def hold(self) -> None:
        """Leave the current request unanswered (and ignore the connection) until resumed."""
        self._hung = True

    def resume(self) -> None:
        self._hung = False

    def answer(
        self,
        status: int,
        retry_after: str | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
    ) -> None:
        """Answer the current request (if still connected): ``status``, ``Retry-After``, other
        ``headers`` and ``body``."""
        if status == 200 and retry_after is None and not headers and not body:
            self._write(_OK)
            return
        reason = http.HTTPStatus(status).phrase if status in _STATUSES else "Status"
        lines = [f"HTTP/1.1 {status} {reason}"]
        lines += [f"Retry-After: {retry_after}"] if retry_after is not None else []
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        lines += [f"Content-Length: {len(body)}", "", ""]
        self._write("\r\n".join(lines).encode("latin-1") + body)


def _content_length(head: bytes) -> int:
    value = _header(head, b"\r\ncontent-length:")
    return int(value) if value else 0


async def serve(host: str, port: int, record: bool = False) -> None:
    loop = asyncio.get_running_loop()
    stats = Stats(record)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server: asyncio.Server | StampedServer
    if record:  # arrival times are judged (the promise checker, W3): the kernel's stamps
        server = await StampedServer.listen(lambda: SinkProtocol(stats), host, port)
    else:  # (uvloop's transports: the fastest, for the throughput benchmarks)
        server = await loop.create_server(
            lambda: SinkProtocol(stats), host, port, backlog=4096, reuse_address=True
        )
    print(f"sink listening on {host}:{port}", flush=True)
    await stop.wait()
    server.close()  # hung connections are not waited for: the process ends


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m emq.rigs.sink", description=__doc__)
    p.add_argument("--host", default="127.0.0.1", help="listen address (loopback)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--record", action="store_true", help="keep a per-request delivery log")
    a = p.parse_args()
    # The /logged/ receiver's lines: the process's output (its log file under the benchmark).
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(message)s")
    raise_fd_limit(0)  # W6b holds thousands of connections open
    uvloop.run(serve(a.host, a.port, a.record))


if __name__ == "__main__":
    main()

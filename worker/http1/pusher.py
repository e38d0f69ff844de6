"""The lean push executor: the :class:`~emq.core.interfaces.Pusher` on the protocol client.

The same contract as the aiohttp executor (:class:`worker.push.PushExecutor`), which it
replaces when ``EMQ_WORKER_HTTP_CLIENT=lean``:

* connect only to addresses the SSRF guard checked (:mod:`worker.http1.pool`), the ``Host``
  header from the URL; TLS verified, SNI the URL's host;
* a connect timeout (resolving, connecting and the TLS handshake) and a total timeout (the
  whole request): both end in ``PushResult(0, error="timed out")``;
* redirects are never followed (a 3xx is an answer like any other);
* at most ``max_response_bytes`` of a body read; the status and ``Retry-After`` are the answer;
* what a push ends in: a :class:`PushResult` (an answer, a timeout, a transport failure: the
  caller retries), or ``DestinationRefused`` (the guard) or ``Undeliverable`` (a URL, method or
  header HTTP cannot carry, :mod:`worker.http1.wire`), neither retryable.

Every push asks the request's ``gate`` right before writing (a wait for a new connection may
have outlasted the quota grant the request was sent under; so may the worker's own work on the
push, or the CPU taken away in between): if it says no, nothing is written, the connection is
kept idle and ``NotSent`` is raised. Nothing but the write lies between the two (measured beside
a busy-loop competitor, W3, from before the gate to after the write: median 34-57 us, p99.9
0.15-0.19 ms, p99.99 1.7-3.6 ms, max 4-11 ms: a CPU taken away right there). The time right after
the write comes back as ``sent_at``; a write later than the pacing window's margin for it
(``write_margin_s``) after the gate is told right after it (the request's ``written``), before
anything else runs, and has its grant moved there (worker.runtime ``_written_late``).

Per push: one cached URL lookup, the request bytes, an idle connection popped from a list,
one write, one future awaited, one entry in the deadline queue (:mod:`worker.http1.deadlines`).
No task, no lock, no timer.
"""

from __future__ import annotations

import asyncio
import ssl
import time

from emq.core.errors import DeliveryError
from emq.core.interfaces import NotSent, Pusher, PushRequest, PushResult
from worker.http1.connection import BadResponse, ConnectionLost, Limits
from worker.http1.deadlines import Deadlines
from worker.http1.pool import SWEEP_S, Pool
from worker.http1.wire import TARGET_CACHE_SIZE, Target, request_bytes, target_of
from worker.protocol_errors import ProtocolErrors
from worker.push import parse_retry_after
from worker.settings import WorkerSettings
from worker.ssrf import AddressPolicy, GuardedResolver


class LeanPusher(Pusher):
    """Sends :class:`PushRequest` s; use as ``async with`` or call :meth:`start`/:meth:`aclose`."""

    # The gate is asked right before every write and a later write moves its grant there
    # (``sent_at``): the margin only sets how many are moved (see worker.groups).
    write_margin_s = 0.0005
    gate_before_write = True
    exact_writes = True  # a later write is told at once (PushRequest.written)

    def __init__(
        self,
        settings: WorkerSettings,
        policy: AddressPolicy,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._policy = policy
        self._total_s = settings.request_timeout_s
        self._connect_s = min(settings.connect_timeout_s, settings.request_timeout_s)
        self._max_body = settings.max_response_bytes
        self._limits = Limits(
            settings.max_response_head_bytes,
            settings.max_response_field_bytes,
            settings.max_response_headers,
        )
        self.protocol_errors = ProtocolErrors()  # (worker.protocol_errors: the metric)
        self._ssl = ssl_context
        self._pool: Pool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._deadlines: Deadlines | None = None
        self._targets: dict[str, Target] = {}

    async def start(self) -> None:
        if self._pool is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._pool = Pool(
            GuardedResolver(self._policy),
            self._max_body,
            self._ssl,
            self._limits,
            self.protocol_errors.count,
        )
        self._deadlines = Deadlines(self._loop)
        self._sweeper = self._loop.call_later(SWEEP_S, self._sweep)

    async def __aenter__(self) -> LeanPusher:
        await self.start()
        return self

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._deadlines is not None:
            self._deadlines.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.close()

    @property
    def connections(self) -> int:
        """Connections open now, idle or busy (for tests and status)."""
        return len(self._pool) if self._pool is not None else 0

    def sweep(self, now: float) -> None:
        """Close the connections idle since before ``now`` less the keep-alive (loop time)."""
        if self._pool is not None:
            self._pool.sweep(now)

    def _sweep(self) -> None:
        if self._pool is None or self._loop is None:
            return
        self._pool.sweep(self._loop.time())
        self._sweeper = self._loop.call_later(SWEEP_S, self._sweep)

    def _target(self, text: str) -> Target:
        target = target_of(text, self._policy)
        if len(self._targets) >= TARGET_CACHE_SIZE:
            self._targets.clear()
        self._targets[text] = target
        return target

    async def push(self, request: PushRequest) -> PushResult:
        if self._pool is None:
            await self.start()
        pool, loop, deadlines = self._pool, self._loop, self._deadlines
        assert pool is not None and loop is not None and deadlines is not None
        target = self._targets.get(request.url) or self._target(request.url)
        data = request_bytes(request.method, target, request.headers, request.body)
        start = time.perf_counter()
        deadline = loop.time() + self._total_s
        conn = pool.idle(target.key)
        sent_at = 0.0
        try:
            if conn is None:
                conn = await pool.open(target, self._connect_s)
                asked_at = time.time()
                if request.gate is not None and not request.gate():
                    pool.keep(conn)  # (opened for nothing: the next push takes it)
                    raise NotSent
                answer = conn.send(data, request.method == "HEAD", request.excerpt_bytes)
                sent_at = time.time()
                conn.endpoint = request.endpoint
                # sent later than the requests queued since: out of the queue's order
                loop.call_at(deadline, conn.expire, conn.sent)
            else:
                asked_at = time.time()
                if request.gate is not None and not request.gate():
                    pool.keep(conn)
                    raise NotSent
                answer = conn.send(data, request.method == "HEAD", request.excerpt_bytes)
                sent_at = time.time()
                conn.endpoint = request.endpoint
                deadlines.add(deadline, conn)
            if sent_at - asked_at > self.write_margin_s and request.written is not None:
                request.written(sent_at)  # (exact_writes: told before anything else runs)
            status, retry_after, ctype, clen, kept = await answer
        except DeliveryError:
            raise
        except TimeoutError:
            return PushResult(0, time.perf_counter() - start, error="timed out", sent_at=sent_at)
        except BadResponse as e:  # "protocol: ..." (worker.protocol_errors)
            return PushResult(0, time.perf_counter() - start, error=str(e), sent_at=sent_at)
        except ConnectionLost as e:
            error = f"{type(e).__name__}: {e}"
            return PushResult(0, time.perf_counter() - start, error=error, sent_at=sent_at)
        except OSError as e:  # could not connect: refused, unreachable, unresolvable, TLS
            # Named as host:port: the operator reading the DLQ sees where it could not connect.
            where = f"[{target.host}]" if ":" in target.host else target.host
            error = f"cannot connect to {where}:{target.port}: {e.strerror or e}"
            return PushResult(0, time.perf_counter() - start, error=error)
        except asyncio.CancelledError:
            if conn is not None:
                conn.abort()  # its answer will never be read: the connection is unusable
            raise
        elapsed = time.perf_counter() - start
        meta = (retry_after, ctype, clen, kept)  # (the attempt log's)
        if retry_after is None:
            return PushResult(status, elapsed, sent_at=sent_at, meta=meta)
        after = parse_retry_after(retry_after.decode("latin-1"), time.time())
        return PushResult(status, elapsed, after, sent_at=sent_at, meta=meta)
